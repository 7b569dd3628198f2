//! The float arithmetic that kernels are written in: f32 for F32/BF16/F16, f64 for F64. One
//! generic body per op serves both.

pub trait Real:
    Copy
    + PartialOrd
    + Send
    + Sync
    + std::ops::Add<Output = Self>
    + std::ops::Sub<Output = Self>
    + std::ops::Mul<Output = Self>
    + std::ops::Div<Output = Self>
    + std::ops::Neg<Output = Self>
    + 'static
{
    fn c(v: f64) -> Self;
    fn exp(self) -> Self;
    fn ln(self) -> Self;
    fn sqrt(self) -> Self;
    fn sin(self) -> Self;
    fn cos(self) -> Self;
    fn atan(self) -> Self;
    fn tanh(self) -> Self;
    fn erf(self) -> Self;
    fn abs(self) -> Self;
    fn powf(self, e: Self) -> Self;
    fn ln_1p(self) -> Self;
    /// e^x - 1, exact near 0 (ELU's negative side).
    fn exp_m1(self) -> Self;
    fn floor(self) -> Self;
    fn ceil(self) -> Self;
    /// The nearest integer, halves to the even one (IEEE's default rounding, ONNX's Round).
    fn round_even(self) -> Self;
    fn is_nan(self) -> bool;
    #[inline]
    fn max(self, o: Self) -> Self {
        if self >= o || self.is_nan() {
            self
        } else {
            o
        }
    }
    #[inline]
    fn min(self, o: Self) -> Self {
        if self <= o || self.is_nan() {
            self
        } else {
            o
        }
    }
}

macro_rules! real {
    ($t:ty, $erf:path, $exp:path) => {
        impl Real for $t {
            #[inline]
            fn c(v: f64) -> Self {
                v as $t
            }
            #[inline]
            fn exp(self) -> Self {
                $exp(self)
            }
            #[inline]
            fn ln(self) -> Self {
                <$t>::ln(self)
            }
            #[inline]
            fn sqrt(self) -> Self {
                <$t>::sqrt(self)
            }
            #[inline]
            fn sin(self) -> Self {
                <$t>::sin(self)
            }
            #[inline]
            fn cos(self) -> Self {
                <$t>::cos(self)
            }
            #[inline]
            fn atan(self) -> Self {
                <$t>::atan(self)
            }
            #[inline]
            fn tanh(self) -> Self {
                <$t>::tanh(self)
            }
            #[inline]
            fn erf(self) -> Self {
                $erf(self)
            }
            #[inline]
            fn abs(self) -> Self {
                <$t>::abs(self)
            }
            #[inline]
            fn powf(self, e: Self) -> Self {
                <$t>::powf(self, e)
            }
            #[inline]
            fn ln_1p(self) -> Self {
                <$t>::ln_1p(self)
            }
            #[inline]
            fn exp_m1(self) -> Self {
                <$t>::exp_m1(self)
            }
            #[inline]
            fn floor(self) -> Self {
                <$t>::floor(self)
            }
            #[inline]
            fn ceil(self) -> Self {
                <$t>::ceil(self)
            }
            #[inline]
            fn round_even(self) -> Self {
                <$t>::round_ties_even(self)
            }
            #[inline]
            fn is_nan(self) -> bool {
                <$t>::is_nan(self)
            }
        }
    };
}
real!(f32, libm::erff, exp_f32);
real!(f64, libm::erf, f64::exp);

/// e^x in f32 arithmetic alone and without branches, so loops over it vectorize (libm's `expf`
/// is an opaque call per element). Within 2 ulp of the correctly rounded result (the test
/// below measures it), including subnormal results; overflow gives inf, NaN stays NaN.
///
/// Cody-Waite reduction x = n ln2 + r with |r| <= ln2/2 (n ln2 split in two so that n * LN2_HI
/// is exact), Cephes' degree-6 polynomial for e^r, then scaling by 2^n in two power-of-two
/// steps: the first is exact, so a subnormal result rounds once. Plain multiplies and adds (Rust
/// never fuses them), so every instruction set gives the same bits.
#[inline]
pub fn exp_f32(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_4; // 355/512: 9 significant bits
    const LN2_LO: f32 = -2.121_944_4e-4;
    /// 1.5 * 2^23: adding it rounds to an integer, which then sits in the low mantissa bits.
    const ROUND: f32 = 12_582_912.0;
    /// ln(f32::MAX) rounded up: above it e^x overflows.
    const HI: f32 = 88.722_84;
    /// ln(2^-150) rounded down: below it e^x rounds to 0.
    const LO: f32 = -103.972_08;
    // `clamp` keeps NaN, so it passes through to the result.
    let xc = x.clamp(LO, HI);
    let t = xc * LOG2E + ROUND;
    let n = t - ROUND;
    let r = (xc - n * LN2_HI) - n * LN2_LO;
    let mut p = 1.987_569_2e-4_f32;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_5e-1;
    p = p * r + 0.5; // Cephes' 5.0000001e-1, which is 0.5 in f32
    let y = p * (r * r) + r + 1.0;
    // n is in [-150, 128]; 2^n = 2^n1 * 2^n2 with both halves normal. Wrapping integer ops: for
    // a NaN input the bits are meaningless but y is NaN already.
    let ni = (t.to_bits() as i32).wrapping_sub(ROUND.to_bits() as i32);
    let n1 = ni >> 1;
    let n2 = ni.wrapping_sub(n1);
    let pow2 = |k: i32| f32::from_bits((k.wrapping_add(127) as u32) << 23);
    let v = y * pow2(n1) * pow2(n2);
    if x > HI {
        f32::INFINITY
    } else if x < LO {
        0.0
    } else {
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Distance in representable f32 values between two results of the same sign (inf sits
    /// one step above f32::MAX).
    fn ulps(a: f32, b: f32) -> u32 {
        a.to_bits().abs_diff(b.to_bits())
    }

    #[test]
    fn exp_f32_is_within_two_ulp_of_the_rounded_f64_exp() {
        let check = |x: f32| {
            let want = (x as f64).exp() as f32;
            let got = exp_f32(x);
            assert!(ulps(got, want) <= 2, "exp({x:e}) = {got:e}, want {want:e}");
        };
        // Every 97th f32 from -104 to 89 (both signs of the reduction, every binade of the
        // result, the subnormal results below -87.3), plus the ends of the range.
        let neg_end = (-104.0f32).to_bits();
        (0x8000_0000..=neg_end)
            .step_by(97)
            .for_each(|b| check(f32::from_bits(b)));
        (0..=89.0f32.to_bits())
            .step_by(97)
            .for_each(|b| check(f32::from_bits(b)));
        for x in [
            0.0,
            -0.0,
            1e-30,
            -1e-30,
            88.72283,
            88.722_84,
            -87.33655,
            -103.97207,
            -103.972_08,
        ] {
            check(x);
        }
        assert_eq!(exp_f32(0.0), 1.0);
        assert_eq!(exp_f32(88.8), f32::INFINITY);
        assert_eq!(exp_f32(f32::INFINITY), f32::INFINITY);
        assert_eq!(exp_f32(f32::MAX), f32::INFINITY);
        assert_eq!(exp_f32(-104.0), 0.0);
        assert_eq!(exp_f32(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp_f32(f32::MIN), 0.0);
        assert!(exp_f32(f32::NAN).is_nan());
        assert!(exp_f32(-f32::NAN).is_nan());
    }
}

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
    fn tanh(self) -> Self;
    fn erf(self) -> Self;
    fn abs(self) -> Self;
    fn powf(self, e: Self) -> Self;
    fn ln_1p(self) -> Self;
    fn is_nan(self) -> bool;
    fn max(self, o: Self) -> Self {
        if self >= o || self.is_nan() {
            self
        } else {
            o
        }
    }
    fn min(self, o: Self) -> Self {
        if self <= o || self.is_nan() {
            self
        } else {
            o
        }
    }
}

macro_rules! real {
    ($t:ty, $erf:path) => {
        impl Real for $t {
            fn c(v: f64) -> Self {
                v as $t
            }
            fn exp(self) -> Self {
                <$t>::exp(self)
            }
            fn ln(self) -> Self {
                <$t>::ln(self)
            }
            fn sqrt(self) -> Self {
                <$t>::sqrt(self)
            }
            fn sin(self) -> Self {
                <$t>::sin(self)
            }
            fn cos(self) -> Self {
                <$t>::cos(self)
            }
            fn tanh(self) -> Self {
                <$t>::tanh(self)
            }
            fn erf(self) -> Self {
                $erf(self)
            }
            fn abs(self) -> Self {
                <$t>::abs(self)
            }
            fn powf(self, e: Self) -> Self {
                <$t>::powf(self, e)
            }
            fn ln_1p(self) -> Self {
                <$t>::ln_1p(self)
            }
            fn is_nan(self) -> bool {
                <$t>::is_nan(self)
            }
        }
    };
}
real!(f32, libm::erff);
real!(f64, libm::erf);

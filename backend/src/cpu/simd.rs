//! Which vector instructions the host's hand-written kernels may use: detected once, capped by
//! `RB_CPU_SIMD` so every path can be measured and tested on one machine.

/// The instruction sets the kernels are written for, best first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Isa {
    Scalar,
    Avx2,
    Avx512,
}

/// The best kernels this CPU runs, at most what `RB_CPU_SIMD` allows (`0` or `scalar`: none,
/// `avx2`: no AVX-512), so each path can be measured and tested on one machine.
pub fn isa() -> Isa {
    use std::sync::OnceLock;
    static ISA: OnceLock<Isa> = OnceLock::new();
    *ISA.get_or_init(|| {
        let cap = match std::env::var("RB_CPU_SIMD").as_deref() {
            Ok("0") | Ok("scalar") => Isa::Scalar,
            Ok("avx2") => Isa::Avx2,
            _ => Isa::Avx512,
        };
        detected().min(cap)
    })
}

/// What the CPU has, ignoring `RB_CPU_SIMD`.
pub fn detected() -> Isa {
    #[cfg(target_arch = "x86_64")]
    {
        let avx2 = is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma")
            && is_x86_feature_detected!("f16c");
        let avx512 = avx2
            && is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512vl")
            && is_x86_feature_detected!("avx512vnni");
        if avx512 {
            return Isa::Avx512;
        }
        if avx2 {
            return Isa::Avx2;
        }
    }
    Isa::Scalar
}

//! Run-time CPU feature checks for the hot loops that are compiled twice (a portable version
//! and one for AVX2 with FMA, where `mul_add`, `floor` and `trunc` are single instructions).

/// Whether this x86-64 CPU has AVX2 and FMA (checked once).
#[cfg(target_arch = "x86_64")]
pub(crate) fn has_avx2_fma() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| {
        std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
    })
}

//! 2-D pooling and nearest upsampling over contiguous [N*C, H, W] planes: the geometry.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolGeometry {
    pub planes: usize,
    pub h: usize,
    pub w: usize,
    pub kernel: (usize, usize),
    pub stride: (usize, usize),
    pub padding: (usize, usize),
    pub ho: usize,
    pub wo: usize,
}

impl PoolGeometry {
    /// The in-bounds window rows and cols of output (oy, ox).
    pub fn window(&self, oy: usize, ox: usize) -> (std::ops::Range<usize>, std::ops::Range<usize>) {
        let y0 = (oy * self.stride.0) as isize - self.padding.0 as isize;
        let x0 = (ox * self.stride.1) as isize - self.padding.1 as isize;
        let clip = |a: isize, k: usize, lim: usize| {
            a.max(0) as usize..((a + k as isize).max(0) as usize).min(lim)
        };
        (
            clip(y0, self.kernel.0, self.h),
            clip(x0, self.kernel.1, self.w),
        )
    }
}

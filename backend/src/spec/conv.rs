//! 2-D convolution: the geometry of one call (NCHW input, OIHW weight, groups).

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conv2dGeometry {
    pub n: usize,
    pub c: usize,
    pub h: usize,
    pub w: usize,
    pub o: usize,
    pub kh: usize,
    pub kw: usize,
    pub stride: (usize, usize),
    pub padding: (usize, usize),
    pub dilation: (usize, usize),
    pub groups: usize,
    pub ho: usize,
    pub wo: usize,
}

impl Conv2dGeometry {
    pub fn cg(&self) -> usize {
        self.c / self.groups
    }
    pub fn og(&self) -> usize {
        self.o / self.groups
    }
    /// Rows of one group's column matrix: Cg * kh * kw.
    pub fn col_rows(&self) -> usize {
        self.cg() * self.kh * self.kw
    }
    pub fn plane_out(&self) -> usize {
        self.ho * self.wo
    }

    /// The input index that output position (oy, ox) reads for kernel tap (ky, kx), if inside.
    #[inline]
    pub fn source(&self, oy: usize, ox: usize, ky: usize, kx: usize) -> Option<(usize, usize)> {
        let y = (oy * self.stride.0 + ky * self.dilation.0).checked_sub(self.padding.0)?;
        let x = (ox * self.stride.1 + kx * self.dilation.1).checked_sub(self.padding.1)?;
        (y < self.h && x < self.w).then_some((y, x))
    }
}

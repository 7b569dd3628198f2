//! The legacy API's descriptors of one convolution (tensors, filter, convolution) and the
//! math modes each dtype may use, shared by the legacy search and the plans.

use super::*;

pub(super) fn data_type(dtype: DType) -> Result<sys::cudnnDataType_t> {
    Ok(match dtype {
        DType::F32 => sys::cudnnDataType_t::CUDNN_DATA_FLOAT,
        DType::F64 => sys::cudnnDataType_t::CUDNN_DATA_DOUBLE,
        DType::F16 => sys::cudnnDataType_t::CUDNN_DATA_HALF,
        DType::BF16 => sys::cudnnDataType_t::CUDNN_DATA_BFLOAT16,
        other => return Err(Error::Cuda(format!("cuDNN convolution: no {other:?}"))),
    })
}

/// The descriptors of one call, destroyed on drop.
pub(super) struct Descriptors {
    pub(super) x: sys::cudnnTensorDescriptor_t,
    pub(super) y: sys::cudnnTensorDescriptor_t,
    pub(super) w: sys::cudnnFilterDescriptor_t,
    pub(super) conv: sys::cudnnConvolutionDescriptor_t,
}

impl Drop for Descriptors {
    fn drop(&mut self) {
        // SAFETY: each was created by `Descriptors::new` and is destroyed once.
        unsafe {
            sys::cudnnDestroyTensorDescriptor(self.x);
            sys::cudnnDestroyTensorDescriptor(self.y);
            sys::cudnnDestroyFilterDescriptor(self.w);
            sys::cudnnDestroyConvolutionDescriptor(self.conv);
        }
    }
}

impl Descriptors {
    pub(super) fn new(g: &Conv2dGeometry, dtype: DType, format: Format) -> Result<Self> {
        let dt = data_type(dtype)?;
        // F64 must accumulate in F64; everything else in F32.
        let compute = if dtype == DType::F64 {
            sys::cudnnDataType_t::CUDNN_DATA_DOUBLE
        } else {
            sys::cudnnDataType_t::CUDNN_DATA_FLOAT
        };
        let i = |v: usize| v as i32;
        let mut d = Descriptors {
            x: std::ptr::null_mut(),
            y: std::ptr::null_mut(),
            w: std::ptr::null_mut(),
            conv: std::ptr::null_mut(),
        };
        let layout = match format {
            Format::Nchw => sys::cudnnTensorFormat_t::CUDNN_TENSOR_NCHW,
            Format::Nhwc => sys::cudnnTensorFormat_t::CUDNN_TENSOR_NHWC,
        };
        // SAFETY: plain descriptor setup on host memory; every status is checked, and `d`'s
        // Drop destroys whatever was created (cuDNN accepts destroying null descriptors).
        unsafe {
            check(
                "cudnnCreateTensorDescriptor",
                sys::cudnnCreateTensorDescriptor(&mut d.x),
            )?;
            check(
                "cudnnCreateTensorDescriptor",
                sys::cudnnCreateTensorDescriptor(&mut d.y),
            )?;
            check(
                "cudnnCreateFilterDescriptor",
                sys::cudnnCreateFilterDescriptor(&mut d.w),
            )?;
            check(
                "cudnnCreateConvolutionDescriptor",
                sys::cudnnCreateConvolutionDescriptor(&mut d.conv),
            )?;
            check(
                "cudnnSetTensor4dDescriptor(x)",
                sys::cudnnSetTensor4dDescriptor(d.x, layout, dt, i(g.n), i(g.c), i(g.h), i(g.w)),
            )?;
            check(
                "cudnnSetTensor4dDescriptor(y)",
                sys::cudnnSetTensor4dDescriptor(d.y, layout, dt, i(g.n), i(g.o), i(g.ho), i(g.wo)),
            )?;
            check(
                "cudnnSetFilter4dDescriptor",
                sys::cudnnSetFilter4dDescriptor(
                    d.w,
                    dt,
                    layout,
                    i(g.o),
                    i(g.cg()),
                    i(g.kh),
                    i(g.kw),
                ),
            )?;
            check(
                "cudnnSetConvolution2dDescriptor",
                sys::cudnnSetConvolution2dDescriptor(
                    d.conv,
                    i(g.padding.0),
                    i(g.padding.1),
                    i(g.stride.0),
                    i(g.stride.1),
                    i(g.dilation.0),
                    i(g.dilation.1),
                    sys::cudnnConvolutionMode_t::CUDNN_CROSS_CORRELATION,
                    compute,
                ),
            )?;
            check(
                "cudnnSetConvolutionGroupCount",
                sys::cudnnSetConvolutionGroupCount(d.conv, i(g.groups)),
            )?;
        }
        Ok(d)
    }

    pub(super) fn set_math(&self, math: sys::cudnnMathType_t) -> Result<()> {
        // SAFETY: a live descriptor.
        unsafe {
            check(
                "cudnnSetConvolutionMathType",
                sys::cudnnSetConvolutionMathType(self.conv, math),
            )
        }
    }
}

/// The math types a pass may run with: FP32 stays off TF32 unless the device allows it.
pub(super) fn allowed_math(dtype: DType, tf32: bool) -> fn(sys::cudnnMathType_t) -> bool {
    use sys::cudnnMathType_t::*;
    match dtype {
        DType::F32 | DType::F64 if !tf32 => |m| m == CUDNN_FMA_MATH,
        _ => |_| true,
    }
}

pub(super) fn requested_math(dtype: DType, tf32: bool) -> sys::cudnnMathType_t {
    use sys::cudnnMathType_t::*;
    match dtype {
        DType::F32 | DType::F64 if !tf32 => CUDNN_FMA_MATH,
        DType::F32 | DType::F64 => CUDNN_DEFAULT_MATH,
        _ => CUDNN_TENSOR_OP_MATH,
    }
}

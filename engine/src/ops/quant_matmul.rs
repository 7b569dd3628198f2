//! Products with a weight kept in one of ggml's block formats (a GGUF file's Q8_0, Q4_1 or
//! Q4_K bytes, unchanged), so a quantized model stays quantized in device memory and a decode
//! step reads a quarter to a half of BF16's bytes.
//!
//! On CUDA, up to eight activation rows go through a dequantizing GEMV that reads every weight
//! byte once; more rows dequantize the weight to the activations' dtype and multiply on
//! cuBLAS. On the CPU, up to eight rows of Q8_0 or Q4_1 go through `cpu::ggml::gemv` (the rows
//! quantized to 8 bits as llama.cpp does, integer dot products); otherwise the weight is
//! dequantized (bit-equal to ggml's reference) and multiplied.
//! There is no gradient for the weight: quantized weights are frozen. The input gets one,
//! dy · W with W dequantized, so an adapter over a quantized base trains (QLoRA).
//!
//! Besides ggml's formats, a matrix may be bitsandbytes' NF4 with double quantization
//! (`BlockFormat::Nf4`, the QLoRA paper's base; host code in `ops/nf4.rs`, kernels in
//! `backend/src/cuda/nf4.rs`), which takes the same two paths through its own kernels.

use super::backward_fn;
use super::dispatch::{cuda_kernel, dispatch};
use super::nf4;
use crate::autograd::no_grad;
use crate::backend::cpu::ggml::gemv::{self as cpu_gemv, Activations};
use crate::backend::cpu::ggml::{quantize, quants};
use crate::backend::cuda::nf4 as cuda_nf4;
use crate::backend::cuda::quant_matmul as cuda;
pub use crate::backend::cuda::quant_matmul::BlockFormat;
use crate::backend::spec::ggml::{self as ty, GgmlType};
use crate::backend::CpuStorage;
use crate::backend::Storage;
use crate::{DType, Device, Error, Result, Tensor};

/// A weight [rows, cols] as ggml blocks (a U8 tensor on the CPU or a device), in the layout
/// the kernels read (`cuda::split`: the file's bits, headers and codes apart).
#[derive(Clone)]
pub struct QuantizedMatrix {
    bytes: Tensor,
    format: BlockFormat,
    rows: usize,
    cols: usize,
    /// The dtype the layer computes in (the dense weight's, or the model's load dtype), which
    /// an adapter over this weight takes.
    dtype: DType,
    /// How the CPU's products read their activations (CUDA's read F32 exactly and BF16 as
    /// int8, by the input's dtype).
    activations: Activations,
}

const OP: &str = "quantized matmul";

/// Activation rows up to which the GEMV (CUDA's kernels, the CPU's `cpu::ggml::gemv`) beats
/// dequantizing and a GEMM.
const GEMV_MAX_ROWS: usize = 8;

/// The ggml type of a ggml block format (NF4 is not one).
fn ggml_type(format: BlockFormat) -> Option<GgmlType> {
    match format {
        BlockFormat::Q8_0 => Some(ty::Q8_0),
        BlockFormat::Q4_1 => Some(ty::Q4_1),
        BlockFormat::Q4_K => Some(ty::Q4_K),
        BlockFormat::Nf4 => None,
    }
}

impl QuantizedMatrix {
    /// The format a GGUF tensor type keeps on the device, if the kernels read it.
    pub fn format_of(t: GgmlType) -> Option<BlockFormat> {
        [BlockFormat::Q8_0, BlockFormat::Q4_1, BlockFormat::Q4_K]
            .into_iter()
            .find(|&f| ggml_type(f) == Some(t))
    }

    /// The format a GGUF tensor type stays in on `device`, if its products there read it: on
    /// CUDA every format the kernels read, on the CPU the ones `cpu::ggml::gemv` reads (a
    /// format dequantized at every product would make a decode step slower than a dense one).
    pub fn kept_on(t: GgmlType, device: Device) -> Option<BlockFormat> {
        Self::format_of(t).filter(|&f| matches!(device, Device::Cuda(_)) || cpu_gemv::reads(f))
    }

    /// `bytes` (as a GGUF file stores them) as a [rows, cols] matrix of `format` blocks, rows
    /// of whole blocks.
    pub fn new(bytes: Vec<u8>, format: BlockFormat, [rows, cols]: [usize; 2]) -> Result<Self> {
        let bytes = cuda::split(format, &bytes, [rows, cols])?;
        let n = bytes.len();
        Ok(QuantizedMatrix {
            bytes: Tensor::from_vec(bytes, &[n])?,
            format,
            rows,
            cols,
            dtype: DType::F32,
            activations: Activations::Int8,
        })
    }

    /// A dense [rows, cols] weight quantized to `format` on the host (ggml's reference
    /// quantizer, or bitsandbytes' rules for NF4), placed on the weight's device and computing
    /// in its dtype.
    pub fn quantize(w: &Tensor, format: BlockFormat) -> Result<Self> {
        let [rows, cols] = *w.shape() else {
            return Err(Error::invalid(
                "quantize",
                format!("a weight [out, in] is quantized, got shape {:?}", w.shape()),
            ));
        };
        let values = no_grad(|| w.to_dtype(DType::F32)?.to_vec::<f32>())?;
        let bytes = match ggml_type(format) {
            Some(t) => quantize::quantize(t, &values),
            None => nf4::quantize(&values, [rows, cols]),
        }
        .and_then(|b| Self::new(b, format, [rows, cols]))?;
        bytes.with_dtype(w.dtype()).to_device(w.device())
    }

    /// The same blocks, computing in `dtype`.
    pub fn with_dtype(self, dtype: DType) -> Self {
        QuantizedMatrix { dtype, ..self }
    }

    /// The same blocks, whose CPU products read F32 activations as they are instead of
    /// rounding them to 8 bits as llama.cpp does: the dense product of the dequantized weight,
    /// for a layer whose outputs must equal it (a tied head's logits).
    pub fn with_exact_activations(self) -> Self {
        QuantizedMatrix {
            activations: Activations::F32,
            ..self
        }
    }

    /// The dtype the layer computes in.
    pub fn compute_dtype(&self) -> DType {
        self.dtype
    }

    /// The blocks on `device` (weights stay where they are when already there).
    pub fn to_device(&self, device: Device) -> Result<Self> {
        Ok(QuantizedMatrix {
            bytes: self.bytes.to_device(device)?,
            ..self.clone()
        })
    }

    pub fn device(&self) -> Device {
        self.bytes.device()
    }

    /// The blocks, a U8 tensor of `size_in_bytes()` (shared, not copied).
    pub fn blocks(&self) -> &Tensor {
        &self.bytes
    }

    pub fn format(&self) -> BlockFormat {
        self.format
    }

    /// [rows, cols].
    pub fn shape(&self) -> [usize; 2] {
        [self.rows, self.cols]
    }

    /// The bytes the blocks take (what one product reads), alignment padding included.
    pub fn size_in_bytes(&self) -> usize {
        self.bytes.numel()
    }

    /// The dense [rows, cols] matrix in `dtype` (F32 or BF16 on CUDA; any float on the CPU).
    pub fn dequantize(&self, dtype: DType) -> Result<Tensor> {
        let shape = [self.rows, self.cols];
        match self.device() {
            Device::Cpu => {
                let bytes = cuda::unsplit(self.format, &self.bytes.to_vec::<u8>()?, shape)?;
                let values = match ggml_type(self.format) {
                    Some(t) => quants::dequantize(t, &bytes)?,
                    None => nf4::dequantize(&bytes, shape)?,
                };
                Tensor::from_vec(values, &shape)?.to_dtype(dtype)
            }
            Device::Cuda(_) => {
                let s = cuda_kernel("dequantize", [&self.bytes], |[(w, _)]| match self.format {
                    BlockFormat::Nf4 => cuda_nf4::dequantize(w, shape, dtype),
                    _ => cuda::dequantize(w, self.format, shape, dtype),
                })?;
                Tensor::from_storage(Storage::Cuda(s), &shape)
            }
        }
    }

    /// Whether a product of `rows` activation rows reads the blocks directly (the GEMV on
    /// CUDA or the CPU) rather than dequantizing the whole weight first.
    pub fn streams(&self, rows: usize) -> bool {
        rows <= GEMV_MAX_ROWS
            && match self.device() {
                Device::Cuda(_) => true,
                Device::Cpu => cpu_gemv::reads(self.format),
            }
    }

    /// x [..., cols] · Wᵀ -> [..., rows], in x's dtype (F32 or BF16 on CUDA).
    ///
    /// One graph node whatever the path, whose backward dequantizes the weight again for
    /// dx = dy · W: nothing dense outlives the product, so a QLoRA step holds the blocks and
    /// not a dense copy of every layer between forward and backward.
    pub fn matmul_t(&self, x: &Tensor) -> Result<Tensor> {
        let k = self.cols;
        if x.shape().last() != Some(&k) {
            return Err(Error::invalid(
                OP,
                format!(
                    "a [{}, {k}] weight multiplies [..., {k}] inputs, got {:?}",
                    self.rows,
                    x.shape()
                ),
            ));
        }
        let in_shape = x.shape().to_vec();
        let m = x.numel() / k;
        let y = no_grad(|| self.product(x, m))?;
        let weight = self.clone();
        Ok(y.recorded(&[x], move || {
            backward_fn(OP, move |dy, _| {
                let w = weight.dequantize(dy.dtype())?;
                let rows = dy.reshape_to(&[m, weight.rows])?.matmul(&w)?;
                Ok(vec![Some(rows.reshape_to(&in_shape)?)])
            })
        }))
    }

    /// The product for m rows of x, without recording: the GEMV for a few rows on CUDA, else
    /// the weight dequantized to x's dtype and a GEMM.
    fn product(&self, x: &Tensor, m: usize) -> Result<Tensor> {
        let k = self.cols;
        let mut out_shape = x.shape().to_vec();
        if let Some(last) = out_shape.last_mut() {
            *last = self.rows;
        }
        match x.device() {
            Device::Cuda(_) if m <= GEMV_MAX_ROWS => {
                let mut x = x.contiguous()?;
                // The kernel reads 16-byte vectors: a view from an odd element is copied.
                if !(x.layout().offset() * x.dtype().size_in_bytes()).is_multiple_of(16) {
                    x = x.contiguous_copy()?;
                }
                let s = cuda_kernel(OP, [&self.bytes, &x], |[(w, _), (xs, l)]| {
                    match self.format {
                        BlockFormat::Nf4 => cuda_nf4::gemv(w, [self.rows, k], xs, l.offset(), m),
                        _ => cuda::quant_gemv(w, self.format, [self.rows, k], xs, l.offset(), m),
                    }
                })?;
                Tensor::from_storage(Storage::Cuda(s), &out_shape)
            }
            Device::Cpu if self.streams(m) => {
                let xf = x.to_dtype(DType::F32)?.contiguous()?;
                let y = dispatch(
                    OP,
                    [&self.bytes, &xf],
                    |[(w, _), (xs, l)]| match (w, xs) {
                        (CpuStorage::U8(w), CpuStorage::F32(xs)) => cpu_gemv::quant_gemv(
                            self.format,
                            w,
                            [self.rows, k],
                            &xs[l.offset()..][..m * k],
                            m,
                            self.activations,
                        ),
                        _ => Err(Error::invalid(OP, "blocks are U8 and rows F32")),
                    },
                    |_| Err(Error::invalid(OP, "the CPU path was given device storage")),
                )?;
                Tensor::from_vec(y, &out_shape)?.to_dtype(x.dtype())
            }
            _ => x
                .reshape_to(&[m, k])?
                .matmul(&self.dequantize(x.dtype())?.t()?)?
                .reshape_to(&out_shape),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_inputs_gradient_is_dy_times_the_dequantized_weight() {
        let values: Vec<f32> = (0..4 * 32)
            .map(|i| ((i * 37 % 23) as f32 - 11.0) / 7.0)
            .collect();
        let w = Tensor::from_vec(values, &[4, 32]).unwrap();
        let q = QuantizedMatrix::quantize(&w, BlockFormat::Q8_0).unwrap();
        let x = Tensor::from_vec((0..64).map(|i| i as f32 / 64.0).collect(), &[2, 32]).unwrap();
        x.set_requires_grad(true).unwrap();
        let dy = Tensor::from_vec(vec![1f32, -2., 0.5, 3., -1., 0., 2., 1.], &[2, 4]).unwrap();
        q.matmul_t(&x)
            .unwrap()
            .mul(&dy)
            .unwrap()
            .sum()
            .unwrap()
            .backward()
            .unwrap();
        let want = dy.matmul(&q.dequantize(DType::F32).unwrap()).unwrap();
        assert_eq!(
            x.grad().unwrap().to_vec::<f32>().unwrap(),
            want.to_vec::<f32>().unwrap()
        );
    }
}

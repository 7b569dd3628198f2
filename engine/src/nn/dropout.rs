//! Dropout with its own seeded generator: in train mode each element is zeroed with probability
//! p and the rest scaled by 1/(1-p); in eval mode it is the identity. The generator is forked
//! from the caller's at construction, so a model's masks depend only on the seed it was built
//! with, and its state (seed, offset) can be saved with a checkpoint.

use super::module::Module;
use crate::{DType, Error, Generator, Result, Tensor};
use std::sync::Mutex;

pub struct Dropout {
    p: f64,
    /// `forward` takes `&self`, so the draw position advances behind a lock.
    gen: Mutex<Generator>,
    training: bool,
}

impl Dropout {
    pub fn new(p: f64, gen: &mut Generator) -> Result<Self> {
        if !(0.0..=1.0).contains(&p) {
            return Err(Error::invalid(
                "Dropout",
                format!("p must be in [0, 1], got {p}"),
            ));
        }
        let words = gen.next_u32s(2);
        let seed = ((words[0] as u64) << 32) | words[1] as u64;
        Ok(Dropout {
            p,
            gen: Mutex::new(Generator::new(seed)),
            training: true,
        })
    }

    pub fn p(&self) -> f64 {
        self.p
    }

    /// The mask generator's state, to save with a checkpoint.
    pub fn generator(&self) -> Generator {
        *self.gen.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn set_generator(&self, gen: Generator) {
        *self.gen.lock().unwrap_or_else(|e| e.into_inner()) = gen;
    }
}

/// `v` as the 0-d operand that `mul_scalar`/`ge_scalar` would use, on `t`'s device.
fn scalar_on(t: &Tensor, v: f64) -> Result<Tensor> {
    t.scalar_like(v)?.to_device(t.device())
}

impl Module for Dropout {
    super::module::training_field!();

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        if !self.training || self.p == 0.0 {
            return Ok(x.clone());
        }
        if self.p == 1.0 {
            return x.mul(&scalar_on(x, 0.0)?);
        }
        // The mask is drawn where x lives; on CUDA the device draws the same stream as the
        // CPU would, so a mask does not depend on the device.
        let u = {
            let mut g = self.gen.lock().unwrap_or_else(|e| e.into_inner());
            Tensor::rand_on(x.shape(), DType::F32, x.device(), Some(&mut g))?
        };
        let keep = u.ge(&scalar_on(&u, self.p)?)?.to_dtype(x.dtype())?;
        x.mul(&keep)?.mul(&scalar_on(x, 1.0 / (1.0 - self.p))?)
    }

    /// Inference: dropout passes its input through.
    fn to_onnx(
        &self,
        _g: &mut crate::io::onnx::export::GraphBuilder,
        _prefix: &str,
        x: &str,
    ) -> Result<String> {
        Ok(x.into())
    }

    fn title(&self) -> String {
        format!("Dropout(p={})", self.p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Device;

    #[test]
    fn dropout_scales_kept_values_in_train_and_is_identity_in_eval() {
        let mut d = Dropout::new(0.25, &mut Generator::new(1)).unwrap();
        let x = Tensor::ones(&[4000], DType::F32, Device::Cpu).unwrap();
        let y = d.forward(&x).unwrap().to_vec_f32().unwrap();
        let kept = y.iter().filter(|&&v| v != 0.0).count();
        assert!(y.iter().all(|&v| v == 0.0 || (v - 1.0 / 0.75).abs() < 1e-6));
        assert!((kept as f64 / 4000.0 - 0.75).abs() < 0.03, "kept {kept}");
        d.eval();
        assert_eq!(
            d.forward(&x).unwrap().to_vec_f32().unwrap(),
            vec![1.0; 4000]
        );
    }

    #[test]
    fn cuda_dropout_mask_matches_the_cpu_mask() {
        let Some(dev) = crate::Device::cuda_for_test("cuda_dropout_mask_matches_the_cpu_mask")
        else {
            return;
        };
        let x = Tensor::randn(&[37, 29], DType::F32, Some(&mut Generator::new(2))).unwrap();
        let (c, g) = (
            Dropout::new(0.3, &mut Generator::new(5)).unwrap(),
            Dropout::new(0.3, &mut Generator::new(5)).unwrap(),
        );
        let yc = c.forward(&x).unwrap();
        let yg = g.forward(&x.to_device(dev).unwrap()).unwrap();
        assert_eq!(yg.device(), dev);
        assert_eq!(yc.to_vec_f32().unwrap(), yg.to_vec_f32().unwrap());
        assert_eq!(c.generator(), g.generator());
    }

    #[test]
    fn dropout_masks_repeat_for_the_same_seed() {
        let x = Tensor::ones(&[64], DType::F32, Device::Cpu).unwrap();
        let mask = |seed| {
            let d = Dropout::new(0.5, &mut Generator::new(seed)).unwrap();
            d.forward(&x).unwrap().to_vec_f32().unwrap()
        };
        assert_eq!(mask(3), mask(3));
        assert_ne!(mask(3), mask(4));
    }
}

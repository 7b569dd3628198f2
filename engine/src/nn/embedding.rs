//! Embedding: a lookup table [num_embeddings, dim] indexed by integer ids of any shape.

use super::init::normal_;
use super::module::{new_parameter, Module};
use crate::{Error, Generator, Result, Tensor};

pub struct Embedding {
    pub weight: Tensor,
    /// PyTorch's `padding_idx`: this row's gradient is always zero (transformers' decoders
    /// build their token embedding with the config's `pad_token_id`).
    pub padding_idx: Option<usize>,
    training: bool,
}

impl Embedding {
    /// N(0, 1) init, PyTorch's default.
    pub fn new(num_embeddings: usize, dim: usize, gen: &mut Generator) -> Result<Self> {
        let weight = new_parameter(&[num_embeddings, dim], |t| normal_(t, 0.0, 1.0, gen))?;
        Ok(Embedding {
            weight,
            padding_idx: None,
            training: true,
        })
    }

    pub fn from_tensor(weight: Tensor) -> Result<Self> {
        if weight.rank() != 2 {
            return Err(Error::invalid(
                "Embedding",
                format!("weight must be [num, dim], got {:?}", weight.shape()),
            ));
        }
        Ok(Embedding {
            weight,
            padding_idx: None,
            training: true,
        })
    }

    pub fn with_padding_idx(mut self, padding_idx: Option<usize>) -> Self {
        self.padding_idx = padding_idx;
        self
    }
}

impl Module for Embedding {
    /// ids [...] (integers) -> [..., dim].
    fn forward(&self, ids: &Tensor) -> Result<Tensor> {
        if ids.dtype().is_float() {
            let dims: Vec<String> = self.weight.shape().iter().map(|d| d.to_string()).collect();
            return Err(Error::layer_input(
                format!("Embedding({})", dims.join(", ")),
                "integer ids",
                format!("{} ids {:?}", ids.dtype(), ids.shape()),
            ));
        }
        let flat = ids.flatten()?;
        let mut rows = self.weight.index_select(0, &flat)?;
        let trains = self.weight.requires_grad() && crate::autograd::is_grad_enabled();
        if let Some(pad) = self.padding_idx.filter(|_| trains) {
            // The same values; where an id is the padding row, the gradient stops.
            let at_pad = flat.eq_scalar(pad as f64)?.unsqueeze(-1)?;
            rows = at_pad.where_cond_of(&rows.detach(), &rows)?;
        }
        let mut shape = ids.shape().to_vec();
        shape.push(self.weight.shape()[1]);
        rows.reshape_to(&shape)
    }

    fn own_parameters(&self) -> Vec<(String, Tensor)> {
        vec![("weight".into(), self.weight.clone())]
    }

    super::module::training_field!();

    fn title(&self) -> String {
        let s = self.weight.shape();
        format!("Embedding({}, {})", s[0], s[1])
    }

    /// A Gather of the weight's rows; `ids` must be an I64 value of the graph.
    fn to_onnx(
        &self,
        g: &mut crate::io::onnx::export::GraphBuilder,
        prefix: &str,
        ids: &str,
    ) -> Result<String> {
        let w = g.initializer(&format!("{prefix}weight"), &self.weight)?;
        Ok(g.node("Gather", &[&w, ids], &[]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedding_rejects_float_ids_saying_what_it_expects() {
        let e = Embedding::new(10, 4, &mut Generator::new(0)).unwrap();
        let ids = Tensor::from_vec(vec![1f32, 2.], &[2]).unwrap();
        let err = e.forward(&ids).err().unwrap().to_string();
        assert_eq!(err, "Embedding(10, 4) expects integer ids, got f32 ids [2]");
    }

    #[test]
    fn embedding_looks_up_rows_for_ids_of_any_shape() {
        let w = Tensor::from_vec(vec![0f32, 1., 10., 11., 20., 21.], &[3, 2]).unwrap();
        let e = Embedding::from_tensor(w).unwrap();
        let ids = Tensor::from_vec(vec![2i64, 0, 1, 2], &[2, 2]).unwrap();
        let y = e.forward(&ids).unwrap();
        assert_eq!(y.shape(), [2, 2, 2]);
        assert_eq!(
            y.to_vec_f32().unwrap(),
            [20., 21., 0., 1., 10., 11., 20., 21.]
        );
        let bad = Tensor::from_vec(vec![3i64], &[1]).unwrap();
        assert!(e.forward(&bad).is_err());
    }
}

//! ModuleList: modules held in a list and named by index (`blocks.0.conv.weight`), run by the
//! module that owns them, as PyTorch's `nn.ModuleList`. Unlike `Sequential` it has no forward:
//! the owner decides how the items are called.

use super::module::Module;
use crate::{Error, Result, Tensor};

pub struct ModuleList {
    items: Vec<Box<dyn Module>>,
    training: bool,
}

impl ModuleList {
    pub fn new(items: Vec<Box<dyn Module>>) -> Self {
        ModuleList {
            items,
            training: true,
        }
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    pub fn get(&self, i: usize) -> Option<&dyn Module> {
        self.items.get(i).map(|m| m.as_ref())
    }
}

impl Module for ModuleList {
    fn forward(&self, _x: &Tensor) -> Result<Tensor> {
        Err(Error::invalid(
            "forward",
            "a ModuleList has no forward of its own: call its items",
        ))
    }

    fn children(&self) -> Vec<(String, &dyn Module)> {
        super::module::indexed("", self.items.iter().map(|m| m.as_ref()))
    }

    fn children_mut(&mut self) -> Vec<&mut dyn Module> {
        self.items
            .iter_mut()
            .map(|m| m.as_mut() as &mut dyn Module)
            .collect()
    }

    super::module::training_field!();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nn::{Dropout, Linear};
    use crate::Generator;

    fn list() -> ModuleList {
        let mut gen = Generator::new(0);
        ModuleList::new(vec![
            Box::new(Linear::new(2, 3, true, &mut gen).unwrap()),
            Box::new(Dropout::new(0.5, &mut gen).unwrap()),
            Box::new(Linear::new(3, 1, false, &mut gen).unwrap()),
        ])
    }

    #[test]
    fn items_are_named_by_their_index() {
        let names: Vec<String> = list()
            .named_parameters()
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(names, ["0.weight", "0.bias", "2.weight"]);
    }

    #[test]
    fn train_and_eval_reach_every_item() {
        let mut l = list();
        l.eval();
        assert!(l.children().iter().all(|(_, m)| !m.is_training()));
        l.train(true);
        assert!(l.children().iter().all(|(_, m)| m.is_training()));
    }

    #[test]
    fn it_has_no_forward_of_its_own() {
        let x = Tensor::zeros(&[1, 2], crate::DType::F32, crate::Device::Cpu).unwrap();
        let err = list().forward(&x).unwrap_err().to_string();
        assert!(err.contains("call its items"), "{err}");
    }
}

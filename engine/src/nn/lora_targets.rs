//! LoRA on any model: adapters on the linear layers whose names a target list picks, as
//! PEFT's `target_modules` does (a target matches a layer whose dotted name is it or ends in
//! `.target`: "query" picks `vit.encoder.layer.0.attention.attention.query`), every other
//! parameter frozen except those under `train_also` (PEFT's `modules_to_save`, such as a new
//! classifier). The walk is `Module::for_each_linear_mut`, so it works on every module,
//! built-in, a family's or one a script assembled.

use super::lora::LoraSpec;
use super::module::Module;
use crate::{Error, Generator, Result};

/// Whether `target` picks the layer named `name`.
fn picks(target: &str, name: &str) -> bool {
    name == target || name.ends_with(&format!(".{target}"))
}

/// Freezes `module`, adds an adapter to each linear layer a target picks, and unfreezes the
/// parameters under each `train_also` name. Returns the adapted layers' names; a target that
/// picks nothing is an error that lists the linear layers there are.
pub fn add_lora(
    module: &mut dyn Module,
    targets: &[String],
    train_also: &[String],
    spec: LoraSpec,
    seed: u64,
) -> Result<Vec<String>> {
    spec.validate()?;
    if targets.is_empty() {
        return Err(Error::invalid("lora", "no target layers given"));
    }
    let mut linears = Vec::new();
    module.for_each_linear_mut("", &mut |name, _| {
        linears.push(name.to_string());
        Ok(())
    })?;
    for target in targets {
        if !linears.iter().any(|n| picks(target, n)) {
            let mut last: Vec<&str> = linears
                .iter()
                .map(|n| n.rsplit('.').next().unwrap_or(n))
                .collect();
            last.sort_unstable();
            last.dedup();
            return Err(Error::invalid(
                "lora",
                format!(
                    "target `{target}` names no linear layer; the model's are named {}",
                    last.join(", ")
                ),
            ));
        }
    }
    let params = module.named_parameters();
    for under in train_also {
        if !params.iter().any(|(n, _)| picks_parameter(under, n)) {
            return Err(Error::invalid(
                "lora",
                format!("train_also `{under}` names no parameters of the model"),
            ));
        }
    }
    for (_, p) in &params {
        p.set_grad(None);
        p.set_requires_grad(false)?;
    }
    let mut gen = Generator::new(seed);
    let mut adapted = Vec::new();
    module.for_each_linear_mut("", &mut |name, linear| {
        if targets.iter().any(|t| picks(t, name)) {
            linear.add_lora(spec, &mut gen)?;
            adapted.push(name.to_string());
        }
        Ok(())
    })?;
    for (name, p) in &params {
        if train_also.iter().any(|u| picks_parameter(u, name)) {
            p.set_requires_grad(true)?;
        }
    }
    Ok(adapted)
}

/// Whether the parameter `name` lies under the module path `under` (at the root, or after a
/// dot: "classifier" picks `classifier.weight`).
fn picks_parameter(under: &str, name: &str) -> bool {
    let at = |s: &str| s.starts_with(&format!("{under}.")) || s == under;
    at(name) || name.match_indices(&format!(".{under}.")).next().is_some()
}

/// Folds every adapter under `module` into its weight; returns how many there were. The
/// parameters stay as they are (frozen or not): the caller decides what trains next.
pub fn merge_lora(module: &mut dyn Module) -> Result<usize> {
    let mut merged = 0;
    module.for_each_linear_mut("", &mut |_, linear| {
        merged += usize::from(linear.merge_lora()?);
        Ok(())
    })?;
    Ok(merged)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nn::{Mlp, Sequential};
    use crate::{DType, Tensor};

    fn spec() -> LoraSpec {
        LoraSpec {
            rank: 2,
            scale: 2.0,
            dropout: 0.0,
        }
    }

    #[test]
    fn targets_pick_layers_by_their_last_names_and_freeze_the_rest() {
        let mut gen = Generator::new(1);
        let mut mlp = Mlp::new(&[4, 8, 3], crate::nn::Activation::Relu, &mut gen).unwrap();
        let names: Vec<String> = mlp.named_parameters().into_iter().map(|(n, _)| n).collect();
        let first = names[0].rsplit_once('.').unwrap().0.to_string();
        let last = names[names.len() - 1]
            .rsplit_once('.')
            .unwrap()
            .0
            .to_string();
        let (targets, train_also) = (vec![first.clone()], vec![last.clone()]);
        let adapted = add_lora(&mut mlp, &targets, &train_also, spec(), 0).unwrap();
        assert_eq!(adapted, targets);
        let trainable: Vec<String> = mlp
            .named_parameters()
            .into_iter()
            .filter(|(_, t)| t.requires_grad())
            .map(|(n, _)| n)
            .collect();
        assert_eq!(
            trainable,
            [
                format!("{first}.lora_A.weight"),
                format!("{first}.lora_B.weight"),
                format!("{last}.weight"),
                format!("{last}.bias"),
            ]
        );
        let err = add_lora(&mut mlp, &["nothing".into()], &[], spec(), 0).unwrap_err();
        assert!(
            err.to_string().contains("`nothing` names no linear layer"),
            "{err}"
        );
    }

    #[test]
    fn merging_folds_the_adapters_into_the_same_outputs() {
        let mut gen = Generator::new(2);
        let mut net = Sequential::new();
        net.push(Box::new(
            Mlp::new(&[3, 5, 2], crate::nn::Activation::Tanh, &mut gen).unwrap(),
        ));
        let names: Vec<String> = net.named_parameters().into_iter().map(|(n, _)| n).collect();
        let target = names[0].rsplit_once('.').unwrap().0.to_string();
        add_lora(&mut net, &[target], &[], spec(), 3).unwrap();
        // A fresh adapter's B is zero: give it values so merging has something to fold.
        for (n, t) in net.named_parameters() {
            if n.ends_with("lora_B.weight") {
                let v = Tensor::randn(t.shape(), DType::F32, Some(&mut gen)).unwrap();
                crate::no_grad(|| t.copy_(&v)).unwrap();
            }
        }
        let x = Tensor::randn(&[4, 3], DType::F32, Some(&mut gen)).unwrap();
        let before = net.forward(&x).unwrap().to_vec_f32().unwrap();
        assert_eq!(merge_lora(&mut net).unwrap(), 1);
        let after = net.forward(&x).unwrap().to_vec_f32().unwrap();
        for (a, b) in before.iter().zip(&after) {
            assert!((a - b).abs() < 1e-5, "{a} vs {b}");
        }
        assert!(net
            .named_parameters()
            .iter()
            .all(|(n, _)| !n.contains("lora")));
    }
}

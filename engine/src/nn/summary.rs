//! What `print(model)` shows: the module tree, one line per layer with its configuration and
//! parameter count, as PyTorch's `repr(model)` does, then the total:
//!
//! ```text
//! Sequential(
//!   (0): Linear(in=4, out=64, bias=true)  320 params
//!   (1): ReLU
//!   (2): Linear(in=64, out=3, bias=true)  195 params
//! )
//! Total: 515 parameters
//! ```
//!
//! Runs of identical children named by consecutive indices fold into one entry, as PyTorch
//! folds a model's decoder layers: `(0-11): 12 x Block(...)`.

use super::Module;
use std::fmt;

/// One node of the printed tree: a layer's line, the parameters it holds itself (its
/// children's excluded) and its named children.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    /// The layer and its configuration: `Linear(in=4, out=64, bias=true)`, `ReLU`.
    pub line: String,
    /// Parameters held by this node, not by its children.
    pub params: usize,
    /// A container's configuration, printed as the first line inside its parentheses (as
    /// PyTorch prints a module's `extra_repr`); empty for none.
    pub detail: String,
    pub children: Vec<(String, Summary)>,
}

impl Summary {
    /// A layer without children.
    pub fn leaf(line: impl Into<String>, params: usize) -> Summary {
        Summary {
            line: line.into(),
            params,
            detail: String::new(),
            children: Vec::new(),
        }
    }

    /// A container of named children (`Sequential`, a model).
    pub fn node(line: impl Into<String>, children: Vec<(String, Summary)>) -> Summary {
        Summary {
            line: line.into(),
            params: 0,
            detail: String::new(),
            children,
        }
    }

    /// Children named "0", "1", ... in order.
    pub fn indexed(line: impl Into<String>, children: Vec<Summary>) -> Summary {
        let named = children
            .into_iter()
            .enumerate()
            .map(|(i, s)| (i.to_string(), s))
            .collect();
        Summary::node(line, named)
    }

    /// Adds a container's configuration line.
    pub fn with_detail(mut self, detail: impl Into<String>) -> Summary {
        self.detail = detail.into();
        self
    }

    fn write(&self, f: &mut fmt::Formatter<'_>, depth: usize, each: bool) -> fmt::Result {
        f.write_str(&self.line)?;
        if self.children.is_empty() {
            if self.params > 0 {
                let each = if each { " each" } else { "" };
                write!(f, "  {} params{each}", with_commas(self.params))?;
            }
            return Ok(());
        }
        f.write_str("(")?;
        if self.params > 0 {
            write!(f, "  {} params", with_commas(self.params))?;
        }
        let pad = "  ".repeat(depth + 1);
        if !self.detail.is_empty() {
            write!(f, "\n{pad}{}", self.detail)?;
        }
        for (names, count, child) in runs(&self.children) {
            let label = match count {
                1 => format!("({names}): "),
                n => format!("({names}): {n} x "),
            };
            write!(f, "\n{pad}{label}")?;
            child.write(f, depth + 1, count > 1)?;
        }
        write!(f, "\n{})", "  ".repeat(depth))
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write(f, 0, false)
    }
}

/// Children grouped into runs of identical layers with consecutive index names:
/// `(label, count, layer)`, the label `3` or `0-11`.
fn runs(children: &[(String, Summary)]) -> Vec<(String, usize, &Summary)> {
    let mut out: Vec<(String, usize, &Summary)> = Vec::new();
    let mut i = 0;
    while i < children.len() {
        let (name, child) = &children[i];
        let mut end = i + 1;
        if let Ok(first) = name.parse::<usize>() {
            while end < children.len()
                && children[end].1 == *child
                && children[end].0.parse::<usize>().ok() == Some(first + (end - i))
            {
                end += 1;
            }
        }
        let label = if end - i == 1 {
            name.clone()
        } else {
            format!("{name}-{}", children[end - 1].0)
        };
        out.push((label, end - i, child));
        i = end;
    }
    out
}

/// The tree followed by the total: what `print(model)` shows.
pub fn describe(module: &dyn Module) -> String {
    format!(
        "{}\nTotal: {} parameters",
        module.summary(),
        with_commas(module.num_parameters())
    )
}

/// `4739` as `4,739`.
pub fn with_commas(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nn::{Activation, Linear, Mlp, Sequential};
    use crate::Generator;

    #[test]
    fn an_mlp_prints_its_layers_with_their_parameter_counts_and_the_total() {
        let m = Mlp::new(&[4, 64, 3], Activation::Relu, &mut Generator::new(0)).unwrap();
        assert_eq!(
            describe(&m),
            "Mlp(\n  (layers): Sequential(\n    (0): Linear(in=4, out=64, bias=true)  320 params\n    \
             (1): ReLU\n    (2): Linear(in=64, out=3, bias=true)  195 params\n  )\n)\nTotal: 515 parameters"
        );
    }

    #[test]
    fn identical_consecutive_layers_fold_into_one_entry() {
        let mut gen = Generator::new(0);
        let mut seq = Sequential::new();
        for _ in 0..3 {
            seq.push(Box::new(Linear::new(2, 2, false, &mut gen).unwrap()));
        }
        seq.push(Box::new(Linear::new(2, 1, false, &mut gen).unwrap()));
        assert_eq!(
            seq.summary().to_string(),
            "Sequential(\n  (0-2): 3 x Linear(in=2, out=2, bias=false)  4 params each\n  \
             (3): Linear(in=2, out=1, bias=false)  2 params\n)"
        );
    }

    #[test]
    fn thousands_are_separated_by_commas() {
        assert_eq!(with_commas(0), "0");
        assert_eq!(with_commas(999), "999");
        assert_eq!(with_commas(4739), "4,739");
        assert_eq!(with_commas(2_590_035), "2,590,035");
    }
}

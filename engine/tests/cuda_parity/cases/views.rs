//! Views and copies: reshapes, permutes, narrows, expands, casts, cat, stack, split, chunk; and
//! the rearranging composites: flip, roll, repeat_interleave, pad, masked_select.

use super::SIZES;
use crate::harness::{normal, Case};
use rusting_brain::{DType, Result, Tensor};

pub const OPS: &[super::Entry] = &[
    ("reshape", || {
        views(|x, r, c| {
            Ok(vec![
                x.reshape(&[-1])?,
                x.reshape(&[c as isize, r as isize])?,
            ])
        })
    }),
    ("permute", || {
        views(|x, r, c| {
            let x3 = x.reshape(&[1, r as isize, c as isize])?;
            Ok(vec![x3.permute(&[2, 0, 1])?, x3.permute(&[1, 2, 0])?])
        })
    }),
    ("transpose", || {
        views(|x, _, _| Ok(vec![x.transpose(0, 1)?, x.unsqueeze(0)?.transpose(0, 2)?]))
    }),
    ("narrow", || {
        views(|x, r, c| Ok(vec![x.narrow(1, c / 3, c - c / 3)?, x.narrow(0, 1, r - 1)?]))
    }),
    ("expand", || {
        views(|x, r, c| {
            Ok(vec![
                x.narrow(1, 0, 1)?.expand(&[r, c])?,
                x.narrow(0, 1, 1)?.expand(&[2, r, c])?,
            ])
        })
    }),
    ("squeeze", || {
        views(|x, _, _| {
            Ok(vec![
                x.unsqueeze(1)?.squeeze(1)?,
                x.unsqueeze(0)?.squeeze(0)?,
            ])
        })
    }),
    ("unsqueeze", || {
        views(|x, _, _| Ok(vec![x.unsqueeze(0)?, x.unsqueeze(-1)?]))
    }),
    ("contiguous", || {
        views(|x, r, c| {
            Ok(vec![
                x.t()?.contiguous()?,
                x.narrow(1, c / 2, c - c / 2)?.contiguous()?,
                x.narrow(0, 1, r - 1)?.t()?.contiguous()?,
            ])
        })
    }),
    ("to_dtype", || {
        views(|x, _, _| DType::ALL.iter().map(|&d| x.to_dtype(d)).collect())
    }),
    ("cat", || {
        views(|x, r, c| {
            let a = x.narrow(1, 0, c.div_ceil(2))?;
            let b = x.narrow(1, c / 2, c - c / 2)?;
            Ok(vec![
                Tensor::cat(&[b.clone(), a.clone(), x.clone()], 1)?,
                Tensor::cat(&[x.clone(), x.narrow(0, 1, r - 1)?], 0)?,
                Tensor::cat(&[x.t()?, x.t()?], -1)?,
            ])
        })
    }),
    ("stack", stack_cases),
    ("flip", || {
        views(|x, _, _| Ok(vec![x.flip(&[1])?, x.flip(&[0, 1])?]))
    }),
    ("roll", || {
        views(|x, _, c| Ok(vec![x.roll(c as i64 / 2 + 1, 1)?, x.roll(-1, 0)?]))
    }),
    ("repeat_interleave", || {
        views(|x, _, _| Ok(vec![x.repeat_interleave(2, 1)?, x.repeat_interleave(3, 0)?]))
    }),
    ("pad", || {
        use rusting_brain::ops::rearrange::PadMode;
        views(|x, r, _| {
            Ok(vec![
                x.pad(&[2, 3, 1, 0], PadMode::Constant(-1.5))?,
                x.pad(&[0, 0, r - 1, r - 1], PadMode::Reflect)?,
                x.pad(&[4, 1], PadMode::Replicate)?,
                x.pad(&[1, 2], PadMode::Circular)?,
            ])
        })
    }),
    ("masked_select", || {
        views(|x, _, _| Ok(vec![x.masked_select(&x.gt_scalar(0.0)?)?]))
    }),
    ("split", || {
        views(|x, _, _| {
            let mut parts = x.split(3, -1)?;
            parts.extend(x.split(2, 0)?);
            Ok(parts)
        })
    }),
    ("chunk", || {
        views(|x, _, _| {
            let mut parts = x.chunk(3, -1)?;
            parts.extend(x.chunk(2, 0)?);
            Ok(parts)
        })
    }),
];

fn views(f: impl Fn(&Tensor, usize, usize) -> Result<Vec<Tensor>> + Clone + 'static) -> Vec<Case> {
    let mut cases: Vec<Case> = SIZES
        .iter()
        .map(|&(r, c)| {
            let g = f.clone();
            Case::new(format!("[{r}, {c}]"), vec![normal(&[r, c])], 1, move |x| {
                g(&x[0], r, c)
            })
        })
        .collect();
    cases.push(Case::new(
        "[5, 33] transposed view",
        vec![normal(&[5, 33]).t()],
        1,
        move |x| f(&x[0], 5, 33),
    ));
    cases
}

fn stack_cases() -> Vec<Case> {
    let mut cases: Vec<Case> = SIZES
        .iter()
        .map(|&(r, c)| {
            Case::new(
                format!("two [{r}, {c}]"),
                vec![normal(&[r, c]), normal(&[r, c])],
                1,
                |x| {
                    let both = [x[0].clone(), x[1].clone()];
                    Ok(vec![Tensor::stack(&both, 0)?, Tensor::stack(&both, -1)?])
                },
            )
        })
        .collect();
    cases.push(Case::new(
        "[5, 33] transposed view and [5, 33]",
        vec![normal(&[5, 33]).t(), normal(&[5, 33])],
        1,
        |x| {
            let both = [x[0].clone(), x[1].clone()];
            Ok(vec![Tensor::stack(&both, 1)?])
        },
    ));
    cases
}

//! Einstein summation (torch.einsum, numpy.einsum, ONNX Einsum) built from permutes, sums and
//! one batched product per pair of operands, so gradients come from those ops. `...` stands
//! for the same leading or trailing dims in every operand; an implicit output (no `->`) keeps
//! the letters that appear once, sorted, after the ellipsis's dims. A letter repeated within
//! one operand (a diagonal) is an error that says so.

use crate::{Error, Result, Tensor};

const OP: &str = "einsum";

fn bad(msg: impl Into<String>) -> Error {
    Error::invalid(OP, msg)
}

impl Tensor {
    /// `equation` over `operands`, as `torch.einsum("bij,bjk->bik", a, b)`.
    pub fn einsum(equation: &str, operands: &[Tensor]) -> Result<Tensor> {
        let spec: String = equation.chars().filter(|c| !c.is_whitespace()).collect();
        let (lhs, out) = match spec.split_once("->") {
            Some((l, r)) => (l.to_string(), Some(r.to_string())),
            None => (spec.clone(), None),
        };
        let inputs: Vec<&str> = lhs.split(',').collect();
        if inputs.len() != operands.len() {
            return Err(bad(format!(
                "\"{equation}\" names {} operands but {} were given",
                inputs.len(),
                operands.len()
            )));
        }
        // The ellipsis becomes capital letters (dims it covers, right-aligned across operands).
        let covered = |s: &str, rank: usize| -> Result<usize> {
            (rank + 3).checked_sub(s.chars().count()).ok_or_else(|| {
                bad(format!(
                    "\"{equation}\": `{s}` has more subscripts than its operand's {rank} dims"
                ))
            })
        };
        let mut ellipsis_rank = 0;
        for (s, t) in inputs.iter().zip(operands) {
            if s.contains("...") {
                ellipsis_rank = ellipsis_rank.max(covered(s, t.rank())?);
            }
        }
        if ellipsis_rank > 26 {
            return Err(bad(format!(
                "\"{equation}\": `...` covers {ellipsis_rank} dims; at most 26"
            )));
        }
        let ellipsis: String = (0..ellipsis_rank)
            .map(|i| (b'A' + i as u8) as char)
            .collect();
        let expand = |s: &str, rank: usize| -> Result<Vec<char>> {
            let letters: Vec<char> = if let Some((a, b)) = s.split_once("...") {
                let tail = &ellipsis[ellipsis_rank - covered(s, rank)?..];
                format!("{a}{tail}{b}").chars().collect()
            } else {
                s.chars().collect()
            };
            if let Some(c) = letters.iter().find(|c| !c.is_ascii_alphabetic()) {
                return Err(bad(format!(
                    "\"{equation}\": `{c}` is not a subscript letter"
                )));
            }
            Ok(letters)
        };
        let mut terms = Vec::new();
        for (s, t) in inputs.iter().zip(operands) {
            let letters = expand(s, t.rank())?;
            if letters.len() != t.rank() {
                return Err(bad(format!(
                    "\"{equation}\": `{s}` has {} subscripts for a tensor of shape {:?}",
                    letters.len(),
                    t.shape()
                )));
            }
            for (i, c) in letters.iter().enumerate() {
                if letters[..i].contains(c) {
                    return Err(bad(format!(
                        "\"{equation}\": `{c}` repeats within `{s}`; diagonals are not supported"
                    )));
                }
            }
            terms.push((letters, t.clone()));
        }
        let output: Vec<char> = match out {
            Some(o) => {
                let letters: Vec<char> = match o.split_once("...") {
                    Some((a, b)) => format!("{a}{ellipsis}{b}").chars().collect(),
                    None => o.chars().collect(),
                };
                for c in &letters {
                    if !terms.iter().any(|(l, _)| l.contains(c)) {
                        return Err(bad(format!(
                            "\"{equation}\": output `{c}` is in no operand"
                        )));
                    }
                }
                letters
            }
            None => {
                let mut once: Vec<char> = ('a'..='z')
                    .chain('A'..='Z')
                    .filter(|c| !ellipsis.contains(*c))
                    .filter(|c| {
                        terms
                            .iter()
                            .map(|(l, _)| l.iter().filter(|x| *x == c).count())
                            .sum::<usize>()
                            == 1
                    })
                    .collect();
                once.sort_unstable();
                ellipsis.chars().chain(once).collect()
            }
        };
        // Sizes must agree (1 broadcasts).
        let mut sizes: Vec<(char, usize)> = Vec::new();
        for (letters, t) in &terms {
            for (c, &n) in letters.iter().zip(t.shape()) {
                match sizes.iter_mut().find(|(x, _)| x == c) {
                    Some((_, m)) if *m == n || n == 1 => {}
                    Some((_, m)) if *m == 1 => *m = n,
                    Some((_, m)) => {
                        return Err(bad(format!(
                            "\"{equation}\": `{c}` is {m} in one operand and {n} in another"
                        )))
                    }
                    None => sizes.push((*c, n)),
                }
            }
        }
        // Contract operands left to right, keeping the letters the output or a later operand reads.
        let mut terms = terms.into_iter();
        let (mut letters, mut acc) = terms
            .next()
            .ok_or_else(|| bad("needs at least one operand"))?;
        let rest: Vec<(Vec<char>, Tensor)> = terms.collect();
        for i in 0..rest.len() {
            let (ref bl, ref b) = rest[i];
            let needed =
                |c: &char| output.contains(c) || rest[i + 1..].iter().any(|(l, _)| l.contains(c));
            (letters, acc) = contract(&letters, &acc, bl, b, &needed)?;
        }
        // Sum what the output does not keep, then order as the output says.
        let drop: Vec<isize> = (0..letters.len())
            .filter(|&i| !output.contains(&letters[i]))
            .map(|i| i as isize)
            .collect();
        if !drop.is_empty() {
            acc = acc.sum_dims(&drop, false)?;
            letters.retain(|c| output.contains(c));
        }
        let perm: Vec<isize> = output
            .iter()
            .map(|c| {
                letters
                    .iter()
                    .position(|x| x == c)
                    .map(|p| p as isize)
                    .ok_or_else(|| bad(format!("`{c}` was lost")))
            })
            .collect::<Result<_>>()?;
        acc.permute(&perm)?.contiguous()
    }
}

/// a ⊗ b summed over the letters both hold that `needed` does not keep: one batched product
/// [batch, kept-a, summed] × [batch, summed, kept-b].
fn contract(
    al: &[char],
    a: &Tensor,
    bl: &[char],
    b: &Tensor,
    needed: &dyn Fn(&char) -> bool,
) -> Result<(Vec<char>, Tensor)> {
    // Letters only one side holds and nothing later needs are summed away first.
    let (al, a) = sum_unneeded(al, a, |c| needed(c) || bl.contains(c))?;
    let (bl, b) = sum_unneeded(bl, b, |c| needed(c) || al.contains(c))?;
    let batch: Vec<char> = al
        .iter()
        .filter(|c| bl.contains(c) && needed(c))
        .copied()
        .collect();
    let summed: Vec<char> = al
        .iter()
        .filter(|c| bl.contains(c) && !needed(c))
        .copied()
        .collect();
    let left: Vec<char> = al.iter().filter(|c| !bl.contains(c)).copied().collect();
    let right: Vec<char> = bl.iter().filter(|c| !al.contains(c)).copied().collect();
    let size = |l: &[char], t: &Tensor, c: char| {
        l.iter().position(|x| *x == c).map_or(1, |p| t.shape()[p])
    };
    let order = |l: &[char], groups: [&[char]; 3]| -> Vec<isize> {
        groups
            .iter()
            .flat_map(|g| g.iter())
            .map(|c| l.iter().position(|x| x == c).unwrap_or(0) as isize)
            .collect()
    };
    let n = |cs: &[char], l: &[char], t: &Tensor| -> Vec<usize> {
        cs.iter().map(|&c| size(l, t, c)).collect()
    };
    let batch_shape: Vec<usize> = batch
        .iter()
        .map(|&c| size(&al, &a, c).max(size(&bl, &b, c)))
        .collect();
    let prod = |v: &[usize]| v.iter().product::<usize>() as isize;
    let (ls, ss, rs) = (n(&left, &al, &a), n(&summed, &al, &a), n(&right, &bl, &b));
    // Broadcast batch dims of size 1 before flattening them.
    let a_shape: Vec<usize> = [batch_shape.clone(), ls.clone(), ss.clone()].concat();
    let b_shape: Vec<usize> = [batch_shape.clone(), ss.clone(), rs.clone()].concat();
    let a3 = a
        .permute(&order(&al, [&batch, &left, &summed]))?
        .expand(&a_shape)?
        .reshape(&[prod(&batch_shape), prod(&ls), prod(&ss)])?;
    let b3 = b
        .permute(&order(&bl, [&batch, &summed, &right]))?
        .expand(&b_shape)?
        .reshape(&[prod(&batch_shape), prod(&ss), prod(&rs)])?;
    let y = a3
        .matmul(&b3)?
        .reshape_to(&[batch_shape, ls, rs].concat())?;
    Ok(([batch, left, right].concat(), y))
}

/// Sums the dims of `t` whose letters `keep` rejects.
fn sum_unneeded(
    l: &[char],
    t: &Tensor,
    keep: impl Fn(&char) -> bool,
) -> Result<(Vec<char>, Tensor)> {
    let drop: Vec<isize> = (0..l.len())
        .filter(|&i| !keep(&l[i]))
        .map(|i| i as isize)
        .collect();
    if drop.is_empty() {
        return Ok((l.to_vec(), t.clone()));
    }
    let kept: Vec<char> = l.iter().filter(|c| keep(c)).copied().collect();
    Ok((kept, t.sum_dims(&drop, false)?))
}

#[cfg(test)]
mod tests {
    use crate::{DType, Generator, Tensor};

    fn randn(shape: &[usize], seed: u64) -> Tensor {
        Tensor::randn(shape, DType::F64, Some(&mut Generator::new(seed))).unwrap()
    }

    fn close(a: &Tensor, b: &Tensor) {
        assert_eq!(a.shape(), b.shape());
        let (a, b) = (a.to_vec_f64().unwrap(), b.to_vec_f64().unwrap());
        for (x, y) in a.iter().zip(&b) {
            assert!((x - y).abs() < 1e-10, "{x} vs {y}");
        }
    }

    #[test]
    fn the_common_patterns_equal_their_direct_forms() {
        let (a, b) = (randn(&[3, 4], 1), randn(&[4, 5], 2));
        close(
            &Tensor::einsum("ij,jk->ik", &[a.clone(), b.clone()]).unwrap(),
            &a.matmul(&b).unwrap(),
        );
        close(
            &Tensor::einsum("ij,jk", &[a.clone(), b.clone()]).unwrap(),
            &a.matmul(&b).unwrap(),
        );
        close(
            &Tensor::einsum("ij->ji", std::slice::from_ref(&a)).unwrap(),
            &a.t().unwrap(),
        );
        close(
            &Tensor::einsum("ij->", std::slice::from_ref(&a)).unwrap(),
            &a.sum().unwrap(),
        );
        close(
            &Tensor::einsum("ij->j", std::slice::from_ref(&a)).unwrap(),
            &a.sum_dims(&[0], false).unwrap(),
        );
        let (q, k) = (randn(&[2, 3, 5, 4], 3), randn(&[2, 3, 6, 4], 4));
        let want = q.matmul(&k.transpose(-1, -2).unwrap()).unwrap();
        close(
            &Tensor::einsum("bhqd,bhkd->bhqk", &[q.clone(), k.clone()]).unwrap(),
            &want,
        );
        close(
            &Tensor::einsum("...qd,...kd->...qk", &[q, k]).unwrap(),
            &want,
        );
        let (u, v) = (randn(&[4], 5), randn(&[3], 6));
        let outer = u
            .unsqueeze(1)
            .unwrap()
            .mul(&v.unsqueeze(0).unwrap())
            .unwrap();
        close(&Tensor::einsum("i,j->ij", &[u.clone(), v]).unwrap(), &outer);
        close(
            &Tensor::einsum("i,i->", &[u.clone(), u.clone()]).unwrap(),
            &u.mul(&u).unwrap().sum().unwrap(),
        );
        // Three operands: a chain of products.
        let c = randn(&[5, 2], 7);
        close(
            &Tensor::einsum("ij,jk,kl->il", &[a.clone(), b.clone(), c.clone()]).unwrap(),
            &a.matmul(&b).unwrap().matmul(&c).unwrap(),
        );
    }

    #[test]
    fn mistakes_in_the_equation_are_errors_that_name_them() {
        let a = randn(&[3, 4], 1);
        let e = Tensor::einsum("ij,jk->ik", std::slice::from_ref(&a))
            .unwrap_err()
            .to_string();
        assert!(e.contains("2 operands but 1"), "{e}");
        let e = Tensor::einsum("ii->i", &[randn(&[3, 3], 2)])
            .unwrap_err()
            .to_string();
        assert!(e.contains("diagonals"), "{e}");
        let e = Tensor::einsum("ij,jk->ik", &[a.clone(), randn(&[5, 2], 3)])
            .unwrap_err()
            .to_string();
        assert!(e.contains("`j` is 4") && e.contains("5"), "{e}");
        let e = Tensor::einsum("ijk->i", std::slice::from_ref(&a))
            .unwrap_err()
            .to_string();
        assert!(e.contains("3 subscripts"), "{e}");
        let e = Tensor::einsum("ij->z", &[a]).unwrap_err().to_string();
        assert!(e.contains("`z` is in no operand"), "{e}");
    }
}

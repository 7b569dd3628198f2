//! Printing like PyTorch: nested brackets, the edges of long dims kept and the middle elided,
//! then shape, dtype and device.

use super::Tensor;
use crate::DType;

/// Tensors with more elements than this print summarized.
const SUMMARIZE_OVER: usize = 1000;
/// How many leading and trailing entries a summarized dim keeps.
const EDGE_ITEMS: usize = 3;

struct Fmt {
    decimals: usize,
    scientific: bool,
    integer: bool,
    boolean: bool,
}

impl Fmt {
    fn for_values(values: &[f64], dtype: DType) -> Fmt {
        let finite: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
        let integer = !dtype.is_float();
        let all_whole = finite.iter().all(|v| v.fract() == 0.0);
        let max = finite.iter().fold(0f64, |m, v| m.max(v.abs()));
        let min_nonzero = finite
            .iter()
            .filter(|v| **v != 0.0)
            .fold(f64::INFINITY, |m, v| m.min(v.abs()));
        let scientific = dtype.is_float() && !all_whole && (max >= 1e8 || min_nonzero < 1e-4);
        Fmt {
            decimals: if all_whole { 0 } else { 4 },
            scientific,
            integer,
            boolean: dtype == DType::Bool,
        }
    }

    fn cell(&self, v: f64) -> String {
        if self.boolean {
            return if v != 0.0 {
                "True".into()
            } else {
                "False".into()
            };
        }
        if self.integer {
            return format!("{}", v as i64);
        }
        if v.is_nan() {
            return "nan".into();
        }
        if v.is_infinite() {
            return if v > 0.0 { "inf".into() } else { "-inf".into() };
        }
        if self.scientific {
            return format!("{v:.4e}");
        }
        if self.decimals == 0 {
            format!("{v:.0}.")
        } else {
            format!("{v:.*}", self.decimals)
        }
    }
}

/// The indices of one dim that are printed (`None` marks the elision).
fn shown(len: usize, summarize: bool) -> Vec<Option<usize>> {
    if summarize && len > 2 * EDGE_ITEMS {
        (0..EDGE_ITEMS)
            .map(Some)
            .chain([None])
            .chain((len - EDGE_ITEMS..len).map(Some))
            .collect()
    } else {
        (0..len).map(Some).collect()
    }
}

/// Everything the nested rendering shares.
struct Printer<'a> {
    values: &'a [f64],
    fmt: Fmt,
    width: usize,
    summarize: bool,
}

impl Printer<'_> {
    fn render(
        &self,
        shape: &[usize],
        strides: &[usize],
        base: usize,
        depth: usize,
        out: &mut String,
    ) {
        if shape.is_empty() {
            out.push_str(&format!(
                "{:>w$}",
                self.fmt.cell(self.values[base]),
                w = self.width
            ));
            return;
        }
        out.push('[');
        let idx = shown(shape[0], self.summarize);
        let last = idx.len().saturating_sub(1);
        for (k, i) in idx.iter().enumerate() {
            match i {
                Some(i) => self.render(
                    &shape[1..],
                    &strides[1..],
                    base + i * strides[0],
                    depth + 1,
                    out,
                ),
                None => out.push_str("..."),
            }
            if k != last {
                if shape.len() == 1 {
                    out.push_str(", ");
                } else {
                    out.push(',');
                    out.push_str(&"\n".repeat(shape.len() - 1));
                    out.push_str(&" ".repeat(depth + 8));
                }
            }
        }
        out.push(']');
    }
}

impl std::fmt::Display for Tensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let values = match self.to_vec_f64() {
            Ok(v) => v,
            Err(e) => return write!(f, "tensor(<unreadable: {e}>)"),
        };
        let summarize = values.len() > SUMMARIZE_OVER;
        let shape = self.shape();
        let strides = crate::layout::contiguous_strides(shape);
        // Format only the values that will show, so width and style follow them.
        let mut visible = Vec::new();
        collect_visible(&values, shape, &strides, 0, summarize, &mut visible);
        let fmt = Fmt::for_values(&visible, self.dtype());
        let width = visible
            .iter()
            .map(|&v| fmt.cell(v).len())
            .max()
            .unwrap_or(1);
        let mut body = String::new();
        if values.is_empty() {
            body.push_str("[]");
        } else {
            Printer {
                values: &values,
                fmt,
                width,
                summarize,
            }
            .render(shape, &strides, 0, 0, &mut body);
        }
        write!(
            f,
            "tensor({body}, shape={:?}, dtype={}, device={}",
            shape,
            self.dtype(),
            self.device()
        )?;
        if self.requires_grad() {
            write!(f, ", requires_grad=true")?;
        }
        write!(f, ")")
    }
}

/// One row of [`Tensor::grid`]: `None` marks an elided column.
pub type GridRow = Vec<Option<String>>;

impl Tensor {
    /// The cells a table shows for a tensor of rank 0, 1 or 2 (a scalar is one cell, a vector
    /// one row), formatted and summarized as printing does: `None` for an elided row, a `None`
    /// cell for an elided column. `None` for higher ranks, which do not lay out as a table.
    pub fn grid(&self) -> crate::Result<Option<Vec<Option<GridRow>>>> {
        let (rows, cols) = match *self.shape() {
            [] => (1, 1),
            [n] => (1, n),
            [r, c] => (r, c),
            _ => return Ok(None),
        };
        let values = self.to_vec_f64()?;
        let summarize = values.len() > SUMMARIZE_OVER;
        let (row_idx, col_idx) = (shown(rows, summarize), shown(cols, summarize));
        let values = &values;
        let visible: Vec<f64> = row_idx
            .iter()
            .flatten()
            .flat_map(|r| col_idx.iter().flatten().map(move |c| values[r * cols + c]))
            .collect();
        let fmt = Fmt::for_values(&visible, self.dtype());
        Ok(Some(
            row_idx
                .iter()
                .map(|r| {
                    r.map(|r| {
                        col_idx
                            .iter()
                            .map(|c| c.map(|c| fmt.cell(values[r * cols + c])))
                            .collect()
                    })
                })
                .collect(),
        ))
    }
}

fn collect_visible(
    values: &[f64],
    shape: &[usize],
    strides: &[usize],
    base: usize,
    summarize: bool,
    out: &mut Vec<f64>,
) {
    if shape.is_empty() {
        if let Some(&v) = values.get(base) {
            out.push(v);
        }
        return;
    }
    for i in shown(shape[0], summarize).into_iter().flatten() {
        collect_visible(
            values,
            &shape[1..],
            &strides[1..],
            base + i * strides[0],
            summarize,
            out,
        );
    }
}

#[cfg(test)]
mod tests {
    use crate::{DType, Tensor};

    #[test]
    fn small_tensors_print_every_value_with_shape_dtype_and_device() {
        let t = Tensor::from_vec(vec![1.5f32, 2.0, -3.25, 4.0], &[2, 2]).unwrap();
        let s = t.to_string();
        assert_eq!(s, "tensor([[ 1.5000,  2.0000],\n        [-3.2500,  4.0000]], shape=[2, 2], dtype=f32, device=cpu)");
    }

    #[test]
    fn large_tensors_keep_the_edges_and_elide_the_middle() {
        let t = Tensor::arange(0.0, 2000.0, 1.0, DType::I64).unwrap();
        let s = t.to_string();
        assert!(
            s.starts_with("tensor([   0,    1,    2, ..., 1997, 1998, 1999]"),
            "{s}"
        );
    }

    #[test]
    fn a_grid_holds_the_printed_cells_and_marks_the_elided_rows_and_columns() {
        let t = Tensor::from_vec(vec![1.5f32, 2.0, -3.25, 4.0], &[2, 2]).unwrap();
        let cell = |s: &str| Some(s.to_string());
        assert_eq!(
            t.grid().unwrap().unwrap(),
            vec![
                Some(vec![cell("1.5000"), cell("2.0000")]),
                Some(vec![cell("-3.2500"), cell("4.0000")])
            ]
        );
        let big = Tensor::arange(0.0, 2000.0, 1.0, DType::I64)
            .unwrap()
            .reshape(&[40, 50])
            .unwrap();
        let grid = big.grid().unwrap().unwrap();
        assert_eq!(grid.len(), 7, "3 rows, the elision, 3 rows");
        assert!(grid[3].is_none());
        let last = grid[6].as_ref().unwrap();
        assert_eq!(last[3], None);
        assert_eq!(last[6], cell("1999"));
        assert!(Tensor::zeros(&[2, 2, 2], DType::F32, crate::Device::Cpu)
            .unwrap()
            .grid()
            .unwrap()
            .is_none());
    }
}

//! `Tensor` as a Rhai type: construction, printing, getters, indexing, operators and the
//! PyTorch-named methods.

mod create;
mod methods;
mod operators;

use crate::convert;
use crate::error::{guard, runtime_error, RhaiResult};
use crate::help::{self, Api};
use rhai::{Array, Dynamic, Engine, Module, INT};
use rusting_brain::ops::region::Axis;
use rusting_brain::{DType, Device, Tensor};
use std::sync::RwLock;

static DEFAULT_DEVICE: RwLock<Device> = RwLock::new(Device::Cpu);

/// The device that constructors place new tensors on (`--device`).
pub fn set_default_device(d: Device) {
    *DEFAULT_DEVICE.write().unwrap_or_else(|e| e.into_inner()) = d;
}

pub fn default_device() -> Device {
    *DEFAULT_DEVICE.read().unwrap_or_else(|e| e.into_inner())
}

pub fn register(engine: &mut Engine) {
    engine.register_type_with_name::<Tensor>("Tensor");
    let mut module = Module::new();
    {
        let mut api = Api::new(&mut module, None);
        create::register(&mut api);
        methods::register(&mut api);
        operators::register(&mut api);
        register_printing(&mut api);
    }
    engine.register_global_module(module.into());
    register_getters(engine);
    register_indexing(engine);
}

fn register_printing(api: &mut Api) {
    api.func(
        "to_string",
        "t.to_string() -> string",
        "The tensor printed like PyTorch: edge values, shape, dtype, device.",
        "let t = randn([2, 3]); print(t)",
        |t: &mut Tensor| t.to_string(),
    );
    api.func(
        "to_debug",
        "t.to_debug() -> string",
        "Same as to_string.",
        "let t = randn([2, 3]); debug(t)",
        |t: &mut Tensor| t.to_string(),
    );
}

fn getter(name: &str, doc: &str) {
    help::getter(
        name,
        &format!("t.{name}"),
        doc,
        &format!("let t = randn([2, 3]); t.{name}"),
    );
}

fn register_getters(engine: &mut Engine) {
    engine.register_get("shape", |t: &mut Tensor| -> rhai::Array {
        t.shape()
            .iter()
            .map(|&d| Dynamic::from_int(d as INT))
            .collect()
    });
    getter("shape", "The shape as an array of ints.");
    engine.register_get("dtype", |t: &mut Tensor| t.dtype().name().to_string());
    getter(
        "dtype",
        "The element type name: f32, bf16, f16, f64, i64, u32, u8 or bool.",
    );
    engine.register_get("device", |t: &mut Tensor| t.device().to_string());
    getter("device", "Where the tensor lives: cpu or cuda:N.");
    engine.register_get("grad", |t: &mut Tensor| -> Dynamic {
        t.grad().map(Dynamic::from).unwrap_or(Dynamic::UNIT)
    });
    getter(
        "grad",
        "The gradient that backward() accumulated, or () when there is none.",
    );
    engine.register_get("requires_grad", |t: &mut Tensor| t.requires_grad());
    getter(
        "requires_grad",
        "Whether backward() computes a gradient for this tensor.",
    );
    engine.register_get("ndim", |t: &mut Tensor| t.rank() as INT);
    getter("ndim", "The number of dimensions.");
    engine.register_get("T", |t: &mut Tensor| guard(|| t.t()));
    getter("T", "The transpose of the last two dims (a view).");
}

/// `t[i]` selects along dim 0 (negative counts from the end); `t[a..b]` slices it.
fn register_indexing(engine: &mut Engine) {
    engine.register_indexer_get(|t: &mut Tensor, i: INT| -> RhaiResult<Tensor> {
        guard(|| t.region(&[Axis::Index(i)]))
    });
    engine.register_indexer_get(|t: &mut Tensor, r: std::ops::Range<INT>| {
        guard(|| t.slice(0, r.start as isize, r.end as isize))
    });
    engine.register_indexer_get(|t: &mut Tensor, r: std::ops::RangeInclusive<INT>| {
        let end = inclusive_end(t, 0, *r.end());
        guard(|| t.slice(0, *r.start() as isize, end as isize))
    });
    engine.register_indexer_get(|t: &mut Tensor, index: Array| -> RhaiResult<Tensor> {
        let axes = axes_of(t, &index)?;
        guard(|| t.region(&axes))
    });
    // x[mask] selects, x[indices] picks rows; x[mask] = v writes where the mask holds.
    engine.register_indexer_get(|t: &mut Tensor, index: Tensor| -> RhaiResult<Tensor> {
        match index.dtype() {
            DType::Bool => guard(|| t.masked_select(&index)),
            d if !d.is_float() => guard(|| t.index_select(0, &index)),
            d => Err(runtime_error(format!(
                "a tensor index must be a bool mask (x[x > 0.0]) or integer indices, got {d}"
            ))),
        }
    });
    engine.register_indexer_set(
        |t: &mut Tensor, mask: Tensor, value: Dynamic| -> RhaiResult<()> {
            if mask.dtype() != DType::Bool {
                return Err(runtime_error(format!(
                    "x[mask] = v needs a bool mask (a comparison such as x > 0.0), got {}",
                    mask.dtype()
                )));
            }
            let value = operand(&value, t)?;
            guard(|| {
                let result = Tensor::where_cond(&mask, &value.to_dtype(t.dtype())?, t)?;
                if result.shape() != t.shape() {
                    return Err(rusting_brain::Error::invalid(
                        "x[mask] = v",
                        format!(
                            "the mask {:?} and value {:?} must broadcast to x's shape {:?}",
                            mask.shape(),
                            value.shape(),
                            t.shape()
                        ),
                    ));
                }
                operators::store(t, result, value.requires_grad())
            })
        },
    );
    register_row_writes(engine);
    help::record_entry(
        "[]",
        "t[i], t[a..b], t[a..=b], t[[index, ...]], t[mask], t[indices]",
        "Index or slice along dim 0 (negative indices count from the end); an array indexes several dims at once, as PyTorch's x[i, a:b, :] (an int drops its dim, a range slices, () takes the whole dim); a bool mask selects the elements where it holds (masked_select), an integer tensor picks rows (index_select). Chains: t[i][j].",
        "let x = randn([3, 4]); let row = x[0]; let top = x[0..2]; let cell = x[[1, -1]]; let column = x[[(), 2]]; let positive = x[x > 0.0]; let picked = x[tensor([2, 0])];",
    );
    help::record_entry(
        "[]",
        "t[mask] = value",
        "Writes value (a number or a tensor broadcast to t) where the bool mask holds, as PyTorch's x[mask] = v; gradients flow through it.",
        "let x = randn([3, 4]); x[x < 0.0] = 0.0;",
    );
}

/// `t[i] = v`, `t[a..b] = v`, `t[a..=b] = v`: rows of dim 0 written with v (a number or a
/// tensor broadcast to them); `t[[i, a..b, ()]] = v` the region of several dims. In place when
/// no graph is involved (so every handle on t, and the tensor a chained `t[i][j] = v` reads
/// through, sees it); otherwise t is rebound to a new tensor, so gradients reach both v and the
/// rest of t.
fn register_row_writes(engine: &mut Engine) {
    // The region refuses a 0-d tensor and out-of-range indices by name.
    fn write(t: &mut Tensor, axes: &[Axis], value: &Dynamic) -> RhaiResult<()> {
        let value = operand(value, t)?;
        guard(|| {
            if operators::writes_in_place(t, value.requires_grad()) {
                t.set_region_(axes, &value)
            } else {
                *t = t.with_region(axes, &value)?;
                Ok(())
            }
        })
    }
    engine
        .register_indexer_set(|t: &mut Tensor, i: INT, v: Dynamic| write(t, &[Axis::Index(i)], &v));
    engine.register_indexer_set(|t: &mut Tensor, r: std::ops::Range<INT>, v: Dynamic| {
        write(t, &[Axis::Range(r.start, r.end)], &v)
    });
    engine.register_indexer_set(
        |t: &mut Tensor, r: std::ops::RangeInclusive<INT>, v: Dynamic| {
            let end = inclusive_end(t, 0, *r.end());
            write(t, &[Axis::Range(*r.start(), end)], &v)
        },
    );
    engine.register_indexer_set(|t: &mut Tensor, index: Array, v: Dynamic| {
        let axes = axes_of(t, &index)?;
        write(t, &axes, &v)
    });
    help::record_entry(
        "[]",
        "t[i] = value, t[a..b] = value, t[i][j] = value, t[[index, ...]] = value",
        "Writes rows of dim 0 (negative indices count from the end), or the region a multi-axis index selects, with value, a number or a tensor broadcast to them, as PyTorch's x[i] = v and x[i, a:b] = v; chains write one element. In place when no gradient is involved; otherwise gradients flow to value and to the rest.",
        "let x = zeros([3, 4]); x[0] = 1.0; x[1..3] = tensor([1.0, 2.0, 3.0, 4.0]); x[2][1] = 9.0; x[[(), 3]] = -1.0;",
    );
}

/// The axes of a multi-axis index `[i, a..b, a..=b, ()]` over `t`'s leading dims: an int picks
/// a position (its dim is dropped), a range slices, `()` takes the whole dim (PyTorch's `:`).
fn axes_of(t: &Tensor, index: &Array) -> RhaiResult<Vec<Axis>> {
    index
        .iter()
        .enumerate()
        .map(|(dim, item)| {
            if let Some(i) = item.clone().try_cast::<INT>() {
                Ok(Axis::Index(i))
            } else if let Some(r) = item.clone().try_cast::<std::ops::Range<INT>>() {
                Ok(Axis::Range(r.start, r.end))
            } else if let Some(r) = item.clone().try_cast::<std::ops::RangeInclusive<INT>>() {
                Ok(Axis::Range(*r.start(), inclusive_end(t, dim, *r.end())))
            } else if item.is_unit() {
                Ok(Axis::Full)
            } else {
                Err(runtime_error(format!(
                    "x[[...]]: index {dim} is a {}; each is an int, a range (1..3, 1..=2) or () for the whole dim",
                    item.type_name()
                )))
            }
        })
        .collect()
}

/// The exclusive end of `a..=end` along `dim`: a negative end counts from the last position
/// first (`x[0..=-1]` is every row), then one past it.
fn inclusive_end(t: &Tensor, dim: usize, end: INT) -> INT {
    let n = t.shape().get(dim).copied().unwrap_or(0) as INT;
    let end = if end < 0 { end + n } else { end };
    // An end before the first position selects nothing (not a count from the back again).
    if end < 0 {
        return 0;
    }
    end.saturating_add(1)
}

/// Reads a tensor argument or converts a number into a 0-d tensor like `other`.
pub(crate) fn operand(v: &Dynamic, like: &Tensor) -> RhaiResult<Tensor> {
    if let Some(t) = v.clone().try_cast::<Tensor>() {
        return Ok(t);
    }
    let x = convert::number(v, "operand")?;
    guard(|| like.scalar_like(x))
}

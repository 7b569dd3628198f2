//! Constructors: `tensor([...])`, zeros, ones, full, rand, randn, randint, arange, linspace,
//! manual_seed. They place tensors on the default device.

use super::default_device;
use crate::convert::{self, shape};
use crate::error::{guard, RhaiResult};
use crate::help::Api;
use rhai::{Array, Map, FLOAT, INT};
use rusting_brain::{manual_seed, DType, Tensor};

crate::options! {
    /// What every constructor takes: the tensor's dtype, its device and whether it records
    /// gradients.
    struct TensorOptions {
        dtype: String,
        device: String,
        requires_grad: bool = false,
    }
}

/// Applies the `dtype`, `device` (the default device when absent) and `requires_grad` options
/// to a freshly built tensor.
fn finish(
    t: Tensor,
    dtype: Option<&str>,
    device: Option<&str>,
    requires_grad: bool,
) -> RhaiResult<Tensor> {
    let t = match dtype {
        Some(d) => {
            let d = convert::dtype(d)?;
            guard(|| t.to_dtype(d))?
        }
        None => t,
    };
    let device = match device {
        Some(d) => convert::device(d)?,
        None => default_device(),
    };
    let t = guard(|| t.to_device(device))?;
    if requires_grad {
        guard(|| t.set_requires_grad(true).map(|_| ()))?;
    }
    Ok(t)
}

impl TensorOptions {
    /// `finish` with these options.
    fn finish(&self, t: Tensor) -> RhaiResult<Tensor> {
        finish(
            t,
            self.dtype.as_deref(),
            self.device.as_deref(),
            self.requires_grad,
        )
    }
}

fn from_array(values: Array, opts: Map) -> RhaiResult<Tensor> {
    let opts = TensorOptions::parse("tensor", opts)?;
    let (v, s, dtype) = convert::nested(&values)?;
    let t = guard(|| Tensor::from_f64s(&v, &s, dtype))?;
    opts.finish(t)
}

/// zeros, ones, full: made in the asked dtype on the asked device at once, so the engine checks
/// the allocation that is really made (an f32 tensor cast afterwards would check the wrong
/// one, and build a buffer it throws away).
fn filled(value: f64, dims: Array, opts: Map, what: &'static str) -> RhaiResult<Tensor> {
    let opts = TensorOptions::parse(what, opts)?;
    let s = shape(&dims, what)?;
    let dtype = match &opts.dtype {
        Some(d) => convert::dtype(d)?,
        None => DType::F32,
    };
    let device = match &opts.device {
        Some(d) => convert::device(d)?,
        None => default_device(),
    };
    opts.finish(guard(|| Tensor::full_for(what, value, &s, dtype, device))?)
}

fn random(dims: Array, opts: Map, what: &str, normal: bool) -> RhaiResult<Tensor> {
    let opts = TensorOptions::parse(what, opts)?;
    let s = shape(&dims, what)?;
    let t = guard(|| {
        if normal {
            Tensor::randn(&s, DType::F32, None)
        } else {
            Tensor::rand(&s, DType::F32, None)
        }
    })?;
    opts.finish(t)
}

pub fn register(api: &mut Api) {
    api.func(
        "tensor",
        "tensor(values) -> Tensor",
        "A tensor from (nested) arrays: ints give i64, floats f32, bools bool.",
        "let x = tensor([[1.0, 2.0], [3.0, 4.0]]);",
        |v: Array| from_array(v, Map::new()),
    );
    api.func(
        "tensor",
        "tensor(values, #{ dtype, device, requires_grad }) -> Tensor",
        "A tensor from (nested) arrays with options.",
        "let w = tensor([0.5, -1.0], #{ requires_grad: true });",
        from_array,
    );
    api.func(
        "zeros",
        "zeros(shape) -> Tensor",
        "A tensor of zeros (f32 unless a dtype option says otherwise).",
        "let z = zeros([2, 3]);",
        |s: Array| filled(0.0, s, Map::new(), "zeros"),
    );
    api.func(
        "zeros",
        "zeros(shape, #{ dtype, device, requires_grad }) -> Tensor",
        "A tensor of zeros with options.",
        "let z = zeros([2, 3], #{ dtype: \"f64\" });",
        |s: Array, o: Map| filled(0.0, s, o, "zeros"),
    );
    api.func(
        "ones",
        "ones(shape) -> Tensor",
        "A tensor of ones.",
        "let o = ones([4]);",
        |s: Array| filled(1.0, s, Map::new(), "ones"),
    );
    api.func(
        "ones",
        "ones(shape, #{ dtype, device, requires_grad }) -> Tensor",
        "A tensor of ones with options.",
        "let o = ones([4], #{ dtype: \"bf16\" });",
        |s: Array, o: Map| filled(1.0, s, o, "ones"),
    );
    api.func(
        "full",
        "full(shape, value) -> Tensor",
        "A tensor filled with one value.",
        "let t = full([2, 2], 7.0);",
        |s: Array, v: FLOAT| filled(v, s, Map::new(), "full"),
    );
    api.func(
        "full",
        "full(shape, value, #{ dtype, device, requires_grad }) -> Tensor",
        "A filled tensor with options.",
        "let t = full([2], 3, #{ dtype: \"i64\" });",
        |s: Array, v: rhai::Dynamic, o: Map| filled(convert::number(&v, "full")?, s, o, "full"),
    );
    api.func(
        "randn",
        "randn(shape) -> Tensor",
        "Standard normal draws from the seeded default generator (see manual_seed).",
        "let x = randn([3, 4]);",
        |s: Array| random(s, Map::new(), "randn", true),
    );
    api.func(
        "randn",
        "randn(shape, #{ dtype, device, requires_grad }) -> Tensor",
        "Normal draws with options.",
        "let w = randn([4, 2], #{ requires_grad: true });",
        |s: Array, o: Map| random(s, o, "randn", true),
    );
    api.func(
        "rand",
        "rand(shape) -> Tensor",
        "Uniform [0, 1) draws from the seeded default generator.",
        "let u = rand([5]);",
        |s: Array| random(s, Map::new(), "rand", false),
    );
    api.func(
        "rand",
        "rand(shape, #{ dtype, device, requires_grad }) -> Tensor",
        "Uniform draws with options.",
        "let u = rand([5], #{ dtype: \"f64\" });",
        |s: Array, o: Map| random(s, o, "rand", false),
    );
    api.func(
        "randint",
        "randint(low, high, shape) -> Tensor",
        "Integers in [low, high) as i64.",
        "let labels = randint(0, 10, [32]);",
        |lo: INT, hi: INT, s: Array| {
            let s = shape(&s, "randint")?;
            guard(|| Tensor::randint(lo, hi, &s, None)?.to_device(default_device()))
        },
    );
    api.func(
        "arange",
        "arange(end) -> Tensor",
        "0, 1, ..., end-1 (i64).",
        "let i = arange(5);",
        |end: INT| guard(|| Tensor::arange(0.0, end as f64, 1.0, DType::I64)),
    );
    api.func(
        "arange",
        "arange(start, end) -> Tensor",
        "start, ..., end-1 (i64 for ints, f32 for floats).",
        "let i = arange(2, 5);",
        |a: rhai::Dynamic, b: rhai::Dynamic| arange(a, b, rhai::Dynamic::from_int(1)),
    );
    api.func(
        "arange",
        "arange(start, end, step) -> Tensor",
        "Values from start by step, below end.",
        "let t = arange(0.0, 1.0, 0.25);",
        arange,
    );
    api.func(
        "linspace",
        "linspace(start, end, steps) -> Tensor",
        "steps evenly spaced f32 values from start to end inclusive.",
        "let x = linspace(-1.0, 1.0, 5);",
        |a: rhai::Dynamic, b: rhai::Dynamic, n: INT| {
            let n = convert::usize_of(n, "linspace")?;
            let (a, b) = (
                convert::number(&a, "linspace")?,
                convert::number(&b, "linspace")?,
            );
            guard(|| Tensor::linspace(a, b, n, DType::F32)?.to_device(default_device()))
        },
    );
    api.func(
        "manual_seed",
        "manual_seed(seed)",
        "Reseeds the default generator, so the following draws repeat.",
        "manual_seed(42);",
        |seed: INT| manual_seed(seed as u64),
    );
}

fn arange(a: rhai::Dynamic, b: rhai::Dynamic, step: rhai::Dynamic) -> RhaiResult<Tensor> {
    let all_int = a.is_int() && b.is_int() && step.is_int();
    let (a, b, s) = (
        convert::number(&a, "arange")?,
        convert::number(&b, "arange")?,
        convert::number(&step, "arange")?,
    );
    let dtype = if all_int { DType::I64 } else { DType::F32 };
    guard(|| Tensor::arange(a, b, s, dtype)?.to_device(default_device()))
}

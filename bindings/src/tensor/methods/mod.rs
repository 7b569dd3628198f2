//! PyTorch-named tensor methods, one family per file. Each is a thin call into the engine.

use rhai::{Array, Dynamic, INT};
use rusting_brain::Tensor;

use crate::error::{runtime_error, RhaiResult};
use crate::help::Api;

/// Registers `x.name()` methods that take no arguments and call the engine method of the same
/// meaning.
macro_rules! unary_methods {
    ($api:expr; $($name:literal => $method:ident, $doc:literal;)*) => {
        $( $api.func($name, concat!("t.", $name, "() -> Tensor"), $doc, concat!("x.", $name, "()"), |t: &mut Tensor| guard(|| t.$method())); )*
    };
}

mod autograd;
mod cast;
mod compare;
mod index;
mod inspect;
mod join_split;
mod math;
mod reduce;
mod shape;

pub fn register(api: &mut Api) {
    math::register(api);
    reduce::register(api);
    compare::register(api);
    shape::register(api);
    join_split::register(api);
    index::register(api);
    cast::register(api);
    inspect::register(api);
    autograd::register(api);
}

/// A single dim as the engine's dims list.
fn one_dim(d: INT) -> Vec<isize> {
    vec![d as isize]
}

/// The tensors of a script array; `what` names the function in the error.
fn tensors(arr: &Array, what: &str) -> RhaiResult<Vec<Tensor>> {
    arr.iter()
        .enumerate()
        .map(|(i, v)| {
            v.clone().try_cast::<Tensor>().ok_or_else(|| {
                runtime_error(format!(
                    "{what}: element {i} is a {}, not a Tensor",
                    v.type_name()
                ))
            })
        })
        .collect()
}

fn to_array(ts: Vec<Tensor>) -> Array {
    ts.into_iter().map(Dynamic::from).collect()
}

//! PyTorch-named tensor methods, one family per file. Each is a thin call into the engine.

use rhai::{Array, Dynamic, INT};
use rusting_brain::Tensor;

use crate::help::Api;

/// Registers `x.name()` methods that take no arguments and call the engine method of the same
/// meaning.
macro_rules! unary_methods {
    ($api:expr; $($name:literal => $method:ident, $doc:literal;)*) => {
        $( $api.func($name, concat!("t.", $name, "() -> Tensor"), $doc, concat!("let x = rand([2, 3]); x.", $name, "()"), |t: &mut Tensor| guard(|| t.$method())); )*
    };
}

mod autograd;
mod cast;
mod compare;
mod count;
mod index;
mod inspect;
mod join_split;
mod math;
mod rearrange;
mod reduce;
mod shape;
mod sort;

pub fn register(api: &mut Api) {
    math::register(api);
    reduce::register(api);
    compare::register(api);
    shape::register(api);
    join_split::register(api);
    index::register(api);
    rearrange::register(api);
    sort::register(api);
    count::register(api);
    cast::register(api);
    inspect::register(api);
    autograd::register(api);
}

/// A single dim as the engine's dims list.
fn one_dim(d: INT) -> Vec<isize> {
    vec![d as isize]
}

fn to_array(ts: Vec<Tensor>) -> Array {
    ts.into_iter().map(Dynamic::from).collect()
}

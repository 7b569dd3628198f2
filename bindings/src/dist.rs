//! The `dist::` namespace: which rank of a `brain launch` run this script is, so that one script
//! runs unchanged on one GPU or several (printing and plotting only on the main rank).

use crate::error::{guard, RhaiResult};
use crate::help::Api;
use rhai::{Engine, Module, INT};
use rusting_brain::dist;

fn current() -> RhaiResult<&'static dist::Dist> {
    guard(dist::current)
}

pub fn register(engine: &mut Engine) {
    let mut module = Module::new();
    {
        let mut api = Api::new(&mut module, Some("dist"));
        api.func(
            "rank",
            "dist::rank() -> int",
            "This process's rank in a `brain launch --gpus N` run, from 0; 0 when run alone.",
            "print(`rank ${dist::rank()} of ${dist::world_size()}`);",
            || -> RhaiResult<INT> { Ok(current()?.rank as INT) },
        );
        api.func(
            "world_size",
            "dist::world_size() -> int",
            "How many ranks the run has (the launcher's --gpus); 1 when run alone.",
            "let per_rank = 64 / dist::world_size();",
            || -> RhaiResult<INT> { Ok(current()?.world_size as INT) },
        );
        api.func(
            "is_main",
            "dist::is_main() -> bool",
            "Whether this is rank 0, the one that prints, plots and writes checkpoints.",
            "if dist::is_main() { print(\"only once\"); }",
            || -> RhaiResult<bool> { Ok(current()?.is_main()) },
        );
        api.func(
            "barrier",
            "dist::barrier()",
            "Waits until every rank has reached its own call (as many calls on each rank); returns at once when run alone.",
            "dist::barrier();",
            || -> RhaiResult<()> { guard(|| dist::current()?.barrier()) },
        );
    }
    engine.register_static_module("dist", module.into());
}

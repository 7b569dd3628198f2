//! Autograd from scripts: backward, requires_grad_, detach, zero_grad and no_grad scopes.

use crate::error::{guard, guard_rhai, RhaiResult};
use crate::help::Api;
use rhai::{Dynamic, FnPtr, NativeCallContext};
use rusting_brain::{NoGradGuard, Tensor};

pub fn register(api: &mut Api) {
    api.func(
        "backward",
        "t.backward()",
        "Backpropagates from a one-element tensor into the .grad of the leaves.",
        "let w = randn([3]).requires_grad_(); let loss = (w * w).sum(); loss.backward();",
        |t: &mut Tensor| guard(|| t.backward()),
    );
    api.func(
        "backward",
        "t.backward(grad)",
        "Backpropagates a given output gradient.",
        "let x = randn([3]).requires_grad_(); let y = x * 2.0; y.backward(ones(y.shape));",
        |t: &mut Tensor, g: Tensor| guard(|| t.backward_with(Some(g), false)),
    );
    api.func(
        "requires_grad_",
        "t.requires_grad_() -> Tensor",
        "Marks a leaf so backward() fills its .grad; returns it.",
        "let w = randn([3]).requires_grad_();",
        |t: &mut Tensor| guard(|| t.set_requires_grad(true).cloned()),
    );
    api.func(
        "requires_grad_",
        "t.requires_grad_(on) -> Tensor",
        "Marks a leaf as trained (true) or frozen (false); returns it.",
        "let w = randn([3]).requires_grad_(false); print(w.requires_grad);",
        |t: &mut Tensor, on: bool| guard(|| t.set_requires_grad(on).cloned()),
    );
    api.func(
        "detach",
        "t.detach() -> Tensor",
        "The same data cut from the autograd graph.",
        "let x = randn([3]).requires_grad_(); let y = x.detach();",
        |t: &mut Tensor| t.detach(),
    );
    api.func(
        "zero_grad",
        "t.zero_grad()",
        "Clears the accumulated gradient.",
        "let w = randn([3]).requires_grad_(); (w * w).sum().backward(); w.zero_grad();",
        |t: &mut Tensor| t.zero_grad(),
    );
    api.func(
        "no_grad",
        "no_grad(|| ...) -> value",
        "Runs the closure with gradient recording off.",
        "let model = nn::linear(4, 2); let x = randn([3, 4]); let y = no_grad(|| model.forward(x));",
        |ctx: NativeCallContext, f: FnPtr| -> RhaiResult<Dynamic> {
            guard_rhai(|| {
                let _guard = NoGradGuard::new();
                f.call_within_context(&ctx, ())
            })
        },
    );
}

//! Modules written in a script (`nn::module`): the names, parameters, modes, printing and state
//! dicts that follow from their fields, and the errors a wrong definition gets.

use rhai::{Array, Dynamic};
use rusting_brain::Tensor;

fn eval(src: &str) -> Result<Dynamic, String> {
    rusting_brain_rhai::new_engine()
        .eval::<Dynamic>(src)
        .map_err(|e| e.to_string())
}

fn strings(src: &str) -> Vec<String> {
    eval(src)
        .unwrap()
        .into_typed_array::<rhai::ImmutableString>()
        .expect("an array of strings")
        .into_iter()
        .map(|s| s.to_string())
        .collect()
}

/// A residual block of two convolutions with batch norms, and a net holding a stem, a list of
/// blocks and a head: the guide's example.
const NET: &str = r#"
fn block(c) {
    nn::module("Residual", #{
        conv1: nn::conv2d_layer(c, c, 3, #{ padding: 1, bias: false, seed: 1 }),
        bn1: nn::batch_norm2d(c),
        conv2: nn::conv2d_layer(c, c, 3, #{ padding: 1, bias: false, seed: 2 }),
        bn2: nn::batch_norm2d(c),
        forward: |x| {
            let y = this.bn1(this.conv1(x)).relu();
            (x + this.bn2(this.conv2(y))).relu()
        }
    })
}
let net = nn::module("Net", #{
    stem: nn::conv2d_layer(1, 4, 3, #{ padding: 1, seed: 3 }),
    blocks: [block(4), block(4)],
    head: nn::sequential([nn::adaptive_avg_pool2d(1), nn::flatten(), nn::linear(4, 2, #{ seed: 4 })]),
    forward: |x| {
        let h = this.stem(x).relu();
        for b in this.blocks { h = b.forward(h); }
        this.head(h)
    }
});
"#;

#[test]
fn fields_name_children_parameters_and_buffers_as_pytorch_does() {
    let names = strings(&format!("{NET} net.state_dict().keys()"));
    for name in [
        "stem.weight",
        "stem.bias",
        "blocks.0.conv1.weight",
        "blocks.1.bn2.running_mean",
        "blocks.1.bn2.num_batches_tracked",
        "head.2.weight",
    ] {
        assert!(names.iter().any(|n| n == name), "{name} not in {names:?}");
    }
    assert_eq!(names.len(), 28);
    let params = strings(&format!("{NET} net.named_parameters().keys()"));
    assert_eq!(params.len(), 16, "{params:?}");
    assert!(!params.iter().any(|n| n.contains("running")));
}

#[test]
fn tensor_fields_are_parameters_when_they_require_grad_and_buffers_otherwise() {
    let src = r#"
        let m = nn::module(#{
            scale: ones([3]).requires_grad_(true),
            offset: zeros([3]),
            forward: |x| x * this.scale + this.offset
        });
        [m.named_parameters().keys(), m.state_dict().keys()]
    "#;
    let both = eval(src).unwrap().into_array().unwrap();
    let keys = |d: &Dynamic| -> Vec<String> {
        d.clone()
            .into_typed_array::<rhai::ImmutableString>()
            .unwrap()
            .iter()
            .map(|s| s.to_string())
            .collect()
    };
    assert_eq!(keys(&both[0]), ["scale"]);
    assert_eq!(keys(&both[1]), ["offset", "scale"]);
}

#[test]
fn an_optimizer_trains_a_script_module() {
    let src = format!(
        r#"{NET}
        manual_seed(5);
        let x = randn([8, 1, 6, 6]);
        let target = tensor([0, 1, 0, 1, 0, 1, 0, 1]);
        let opt = optim::sgd(net.parameters(), #{{ lr: 0.1 }});
        let losses = [];
        for i in 0..5 {{
            let loss = nn::cross_entropy(net.forward(x), target);
            opt.zero_grad();
            loss.backward();
            opt.step();
            losses.push(loss.item());
        }}
        losses"#
    );
    let losses: Vec<f64> = eval(&src).unwrap().into_typed_array::<f64>().unwrap();
    assert!(
        losses[4] < losses[0] * 0.9,
        "the loss should fall: {losses:?}"
    );
}

#[test]
fn train_and_eval_reach_every_child_and_this_training() {
    let src = r#"
        let m = nn::module(#{
            drop: nn::dropout(0.5),
            inner: [nn::dropout(0.5)],
            forward: |x| if this.training { x * 2.0 } else { x }
        });
        m.eval();
        let off = [m.training, m.forward(ones([1])).item()];
        m.train();
        [off, [m.training, m.forward(ones([1])).item()]]
    "#;
    let out = format!("{:?}", eval(src).unwrap());
    assert_eq!(out, "[[false, 1.0], [true, 2.0]]");
    let children_off = r#"
        let d = nn::dropout(0.5);
        let listed = nn::dropout(0.5);
        let m = nn::module(#{ d: d, l: [listed], forward: |x| x });
        m.eval();
        [d.training, listed.training]
    "#;
    assert_eq!(
        format!("{:?}", eval(children_off).unwrap()),
        "[false, false]"
    );
}

#[test]
fn print_shows_the_tree_with_lists_folded() {
    let text = eval(&format!("{NET} net.to_string()"))
        .unwrap()
        .into_string()
        .unwrap();
    assert!(text.starts_with("Net(\n"), "{text}");
    assert!(
        text.contains("(blocks): ModuleList(\n    (0-1): 2 x Residual("),
        "{text}"
    );
    assert!(text.contains("Total: 658 parameters"), "{text}");
}

#[test]
fn a_script_module_runs_inside_a_sequential() {
    let src = r#"
        let double = nn::module(#{ forward: |x| x * 2.0 });
        let seq = nn::sequential([nn::linear(2, 2, #{ bias: false }), double]);
        let x = tensor([[1.0, 2.0]]);
        [seq.forward(x), double.forward(seq.named_parameters()["0.weight"].matmul(x.t()).t())]
    "#;
    let out: Array = eval(src).unwrap().into_array().unwrap();
    let a = out[0].clone().cast::<Tensor>().to_vec_f32().unwrap();
    let b = out[1].clone().cast::<Tensor>().to_vec_f32().unwrap();
    assert_eq!(a, b);
}

#[test]
fn a_state_dict_loads_back_into_a_fresh_module() {
    let src = r#"
        fn make(seed) { nn::module(#{ fc: nn::linear(3, 2, #{ seed: seed }), forward: |x| this.fc(x) }) }
        let a = make(1);
        let b = make(2);
        let x = ones([1, 3]);
        let before = (a.forward(x) - b.forward(x)).abs().sum().item();
        b.load_state_dict(a.state_dict());
        [before, (a.forward(x) - b.forward(x)).abs().sum().item()]
    "#;
    let out: Vec<f64> = eval(src).unwrap().into_typed_array::<f64>().unwrap();
    assert!(out[0] > 0.0, "{out:?}");
    assert_eq!(out[1], 0.0);
}

#[test]
fn a_module_without_forward_is_refused_by_name() {
    let err = eval("nn::module(\"Block\", #{ fc: nn::linear(2, 2) })").unwrap_err();
    assert!(
        err.contains("nn::module Block: needs a forward closure"),
        "{err}"
    );
    let err = eval("nn::module(#{ forward: 3 })").unwrap_err();
    assert!(err.contains("forward must be a closure"), "{err}");
}

#[test]
fn a_list_mixing_models_and_other_values_is_refused() {
    let err = eval("nn::module(#{ blocks: [nn::linear(2, 2), 3], forward: |x| x })").unwrap_err();
    assert!(
        err.contains("blocks mixes models with a i64 at index 1"),
        "{err}"
    );
}

#[test]
fn a_forward_that_returns_no_tensor_says_what_it_returned() {
    let err =
        eval("let m = nn::module(\"Odd\", #{ forward: |x| 3 }); m.forward(ones([1]))").unwrap_err();
    assert!(
        err.contains("Odd.forward returned a i64, not a Tensor"),
        "{err}"
    );
}

#[test]
fn an_error_inside_forward_reaches_the_script_as_raised() {
    let err = eval("let m = nn::module(#{ forward: |x| x.no_such_op() }); m.forward(ones([1]))")
        .unwrap_err();
    assert!(err.starts_with("Function not found: no_such_op"), "{err}");
    // Through a container too: the sequential's forward runs the closure.
    let err = eval(
        "let m = nn::module(#{ forward: |x| x.no_such_op() }); nn::sequential([m]).forward(ones([1]))",
    )
    .unwrap_err();
    assert!(err.starts_with("Function not found: no_such_op"), "{err}");
}

#[test]
fn a_field_that_is_not_a_model_is_not_callable() {
    let err = eval("let m = nn::module(#{ k: 3, forward: |x| this.k(x) }); m.forward(ones([1]))")
        .unwrap_err();
    assert!(err.contains("Function not found: k"), "{err}");
}

#[test]
fn a_state_dict_loads_with_renamed_prefixes_and_reports_what_it_skipped() {
    let src = r#"
        let m = nn::module(#{ fc: nn::linear(2, 2, #{ seed: 1 }), forward: |x| this.fc(x) });
        let saved = #{ "module.fc.weight": ones([2, 2]), "module.extra": zeros([1]) };
        let report = m.load_state_dict(saved, #{ strict: false, rename: #{ "module.": "" } });
        [report.missing, report.unexpected, m.named_parameters()["fc.weight"].sum().item()]
    "#;
    let out = format!("{:?}", eval(src).unwrap());
    assert_eq!(out, r#"[["fc.bias"], ["extra"], 4.0]"#);
    let err =
        eval("let m = nn::linear(2, 2); m.load_state_dict(#{ \"w\": ones([1]) }, #{ rename: 3 })")
            .unwrap_err();
    assert!(err.contains("rename must be a map"), "{err}");
}

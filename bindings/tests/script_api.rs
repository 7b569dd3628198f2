//! Scripts against the bindings: operators, indexing, autograd, options and errors.

use rhai::Dynamic;
use rusting_brain::Tensor;

fn eval(src: &str) -> Result<Dynamic, String> {
    rusting_brain_rhai::new_engine()
        .eval::<Dynamic>(src)
        .map_err(|e| e.to_string())
}

fn values(src: &str) -> Vec<f64> {
    eval(src)
        .unwrap()
        .try_cast::<Tensor>()
        .expect("a tensor")
        .to_vec_f64()
        .unwrap()
}

#[test]
fn operators_mix_tensors_and_numbers_on_either_side() {
    assert_eq!(
        values("let x = tensor([1.0, 2.0]); 1 - x * 2 + x / 2.0"),
        vec![-0.5, -2.0]
    );
    assert_eq!(values("-tensor([1, 2])"), vec![-1.0, -2.0]);
    assert_eq!(values("tensor([1.0, 3.0]) > 2.0").len(), 2);
}

#[test]
fn indexing_selects_rows_and_ranges_with_negative_indices() {
    assert_eq!(
        values("let x = arange(6).reshape([3, 2]); x[-1]"),
        vec![4.0, 5.0]
    );
    assert_eq!(
        values("let x = arange(6).reshape([3, 2]); x[1..3]"),
        vec![2.0, 3.0, 4.0, 5.0]
    );
    assert!(eval("let x = arange(6).reshape([3, 2]); x[3]")
        .unwrap_err()
        .contains("index 3 is out of range for dim 0 of size 3"));
}

#[test]
fn gradients_flow_from_a_script() {
    let g = values("let w = tensor([1.0, 2.0], #{ requires_grad: true }); let loss = (w * w).sum(); loss.backward(); w.grad");
    assert_eq!(g, vec![2.0, 4.0]);
}

#[test]
fn compound_assignment_builds_a_graph_when_gradients_are_involved() {
    let g = values("let w = tensor([3.0], #{ requires_grad: true }); let total = zeros([1]); for i in 0..4 { total += w * 2.0; } total.sum().backward(); w.grad");
    assert_eq!(g, vec![8.0]);
    assert_eq!(
        values("let a = ones([2]); let b = a; b += 1; a"),
        vec![2.0, 2.0],
        "without grad, += writes in place like PyTorch"
    );
}

#[test]
fn an_unknown_option_lists_the_valid_keys() {
    let err = eval("zeros([2], #{ dtpye: \"f64\" })").unwrap_err();
    assert!(
        err.contains(
            "unknown option dtpye (did you mean `dtype`?); valid options: dtype, device, requires_grad"
        ),
        "{err}"
    );
}

#[test]
fn engine_errors_become_script_errors_with_a_position() {
    let err = eval("let a = ones([2, 3]);\nlet b = a.matmul(ones([2, 3]));").unwrap_err();
    assert!(
        err.contains("matmul: shape mismatch between [2, 3] and [2, 3]"),
        "{err}"
    );
    assert!(err.contains("line 2"), "{err}");
}

#[test]
fn no_grad_turns_recording_off_inside_the_closure() {
    let r = eval(
        "let w = ones([2], #{ requires_grad: true }); let y = no_grad(|| w * 2.0); y.requires_grad",
    )
    .unwrap();
    assert!(!r.as_bool().unwrap());
}

#[test]
fn nn_functions_compute_losses_and_convolutions() {
    let l = values("nn::cross_entropy(tensor([[0.0, 0.0]]), tensor([1]))");
    assert!((l[0] - 2f64.ln()).abs() < 1e-6);
    assert_eq!(
        eval("nn::conv2d(ones([1, 1, 4, 4]), ones([2, 1, 3, 3]), (), #{ padding: 1 }).shape")
            .unwrap()
            .to_string(),
        "[1, 2, 4, 4]"
    );
}

#[test]
fn tolist_and_item_return_script_values() {
    assert_eq!(
        eval("tensor([[1, 2], [3, 4]]).tolist()")
            .unwrap()
            .to_string(),
        "[[1, 2], [3, 4]]"
    );
    assert_eq!(
        eval("tensor([2.5]).item()").unwrap().as_float().unwrap(),
        2.5
    );
}

#[test]
fn an_optimizer_step_updates_the_models_own_parameters() {
    let r = eval(
        "let m = nn::linear(2, 1, #{ seed: 1 }); let before = m.parameters()[0].tolist();
         let opt = optim::sgd(m.parameters(), #{ lr: 0.5 });
         let loss = m.forward(ones([4, 2])).sum(); loss.backward(); let info = opt.step();
         [before, m.parameters()[0].tolist(), info.applied]",
    )
    .unwrap()
    .into_array()
    .unwrap();
    assert_ne!(r[0].to_string(), r[1].to_string(), "the weights moved");
    assert!(r[2].as_bool().unwrap());
}

#[test]
fn state_dicts_round_trip_through_a_safetensors_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.safetensors");
    let src = format!(
        "let a = nn::mlp([3, 4, 2], #{{ seed: 1 }}); io::save(a.state_dict(), \"{p}\");
         let b = nn::mlp([3, 4, 2], #{{ seed: 2 }}); b.load_state_dict(io::load(\"{p}\"));
         let x = randn([5, 3]); (a.forward(x) - b.forward(x)).abs().max().item()",
        p = path.display()
    );
    assert_eq!(eval(&src).unwrap().as_float().unwrap(), 0.0);
    let err = eval(&format!(
        "let c = nn::mlp([3, 5, 2]); c.load_state_dict(io::load(\"{}\"))",
        path.display()
    ))
    .unwrap_err();
    assert!(err.contains("layers.0.weight"), "{err}");
}

#[test]
fn datasets_split_and_batch_from_a_script() {
    let r = eval("let ds = data::spirals(50, #{ seed: 3 }); let p = ds.split(0.8, 1); let b = p[0].batches(#{ batch_size: 32 }); [p[0].len(), p[1].len(), b.len(), b[0][0].shape]").unwrap();
    assert_eq!(r.to_string(), "[80, 20, 3, [32, 2]]");
}

#[test]
fn layers_compose_into_a_sequential_that_shares_their_parameters() {
    let r = eval(
        "let first = nn::linear(4, 8, #{ seed: 1 });
         let m = nn::sequential([first, nn::activation(\"gelu\"), nn::layer_norm(8), nn::dropout(0.1), nn::linear(8, 3)]);
         m.eval_mode();
         let y = m.forward(randn([5, 4]));
         [y.shape, m.named_parameters().keys().len(), first.parameters()[0].shares_with(m.parameters()[0])]",
    );
    let r = r.unwrap().into_array().unwrap();
    assert_eq!(r[0].to_string(), "[5, 3]");
    assert_eq!(r[1].as_int().unwrap(), 6);
    assert!(r[2].as_bool().unwrap());
}

#[test]
fn sort_and_topk_return_a_map_of_values_and_indices() {
    assert_eq!(
        values("tensor([3.0, 1.0, 2.0]).sort(-1, true).values"),
        [3.0, 2.0, 1.0]
    );
    assert_eq!(
        values("tensor([3.0, 1.0, 2.0]).topk(2).indices"),
        [0.0, 2.0]
    );
    assert_eq!(
        values("tensor([2, 2, 0]).unique_counts().counts"),
        [1.0, 2.0]
    );
}

#[test]
fn classification_metrics_take_logits_or_ids_from_a_script() {
    let acc =
        eval("metrics::accuracy(tensor([[2.0, 0.0], [0.0, 1.0], [3.0, 1.0]]), tensor([0, 1, 1]))")
            .unwrap()
            .as_float()
            .unwrap();
    assert!((acc - 2.0 / 3.0).abs() < 1e-12);
    let f1 = eval("metrics::precision_recall_f1(tensor([0, 1, 1]), tensor([0, 1, 0])).f1")
        .unwrap()
        .into_typed_array::<f64>()
        .unwrap();
    assert_eq!(f1, [2.0 / 3.0, 2.0 / 3.0]);
    let e = eval("metrics::confusion_matrix(tensor([0, 5]), tensor([0, 1]), 3)").unwrap_err();
    assert!(e.contains("prediction 1 is class 5"), "{e}");
}

#[test]
fn a_bool_mask_selects_and_an_int_tensor_picks_rows() {
    assert_eq!(
        values("let x = tensor([[1.0, -2.0], [-3.0, 4.0]]); x[x > 0.0]"),
        vec![1.0, 4.0]
    );
    assert_eq!(
        values("let x = arange(6).reshape([3, 2]); x[tensor([2, 0])]"),
        vec![4.0, 5.0, 0.0, 1.0]
    );
    let err = eval("let x = ones([2]); x[tensor([0.5])]").unwrap_err();
    assert!(
        err.contains("a bool mask (x[x > 0.0]) or integer indices"),
        "{err}"
    );
}

#[test]
fn assigning_through_a_mask_writes_where_it_holds() {
    assert_eq!(
        values("let x = tensor([1.0, -2.0, 3.0]); x[x < 0.0] = 0.0; x"),
        vec![1.0, 0.0, 3.0]
    );
    // In place when no graph is involved: another handle on x sees the write.
    assert_eq!(
        values("let x = tensor([1.0, -2.0]); let y = x; x[x < 0.0] = 5.0; y"),
        vec![1.0, 5.0]
    );
    let err = eval("let x = ones([2]); x[tensor([1, 0])] = 0.0").unwrap_err();
    assert!(err.contains("needs a bool mask"), "{err}");
}

#[test]
fn gradients_flow_through_a_masked_assignment() {
    let grad = values(
        "let w = tensor([1.0, -2.0, 3.0], #{ requires_grad: true });
         let y = w * 2.0;
         y[y < 0.0] = 0.0;
         y.sum().backward();
         w.grad",
    );
    assert_eq!(grad, vec![2.0, 0.0, 2.0]);
}

#[test]
fn the_power_operator_raises_a_tensor_elementwise() {
    assert_eq!(values("tensor([1.0, 2.0, 3.0]) ** 2"), vec![1.0, 4.0, 9.0]);
    assert_eq!(values("tensor([4.0, 9.0]) ** 0.5"), vec![2.0, 3.0]);
}

fn script_error(src: &str) -> String {
    let engine = rusting_brain_rhai::new_engine();
    let e = engine.eval::<Dynamic>(src).unwrap_err();
    rusting_brain_rhai::error::in_script_terms(&engine, e).to_string()
}

#[test]
fn a_tensor_in_an_if_says_how_to_test_it() {
    let msg = script_error("let x = tensor([1.0]); if x > 0.0 { 1 } else { 2 }");
    assert!(
        msg.contains("a tensor is not a bool; use `.item() > 0.0`"),
        "{msg}"
    );
}

/// A call that matches no form lists the forms the name has; a misspelt name gets the
/// registered name nearest it.
#[test]
fn a_call_that_matches_nothing_says_what_there_is() {
    let msg = script_error("nn::linear(2)");
    assert!(
        msg.contains("Function not found: nn::linear (i64); nn::linear takes: ")
            && msg.contains("nn::linear(in, out) -> Model"),
        "{msg}"
    );
    let msg = script_error("let x = tensor([1.0]); x.sofmax(0)");
    assert!(
        msg.contains("sofmax (Tensor, i64); did you mean softmax? ("),
        "{msg}"
    );
    let msg = script_error("completely_unknown_thing(1)");
    assert!(
        msg.contains("Function not found: completely_unknown_thing (i64) ("),
        "{msg}"
    );
}

#[test]
fn errors_name_types_as_scripts_do() {
    // Rhai names the Rust type where a value of the wrong type is used as an array index.
    let src = "let i = tensor([1.0]); let a = [1, 2]; a[i]";
    let raw = rusting_brain_rhai::new_engine()
        .eval::<Dynamic>(src)
        .unwrap_err()
        .to_string();
    assert!(
        raw.contains("rusting_brain::"),
        "the case no longer shows a path: {raw}"
    );
    let msg = script_error(src);
    assert!(msg.contains("Tensor") && !msg.contains("::"), "{msg}");
}

#[test]
fn a_diffusion_scheduler_reads_a_folder_and_walks_from_a_script() {
    let dir = std::env::temp_dir().join(format!("rb_sched_{}", std::process::id()));
    std::fs::create_dir_all(dir.join("scheduler")).unwrap();
    std::fs::write(
        dir.join("scheduler/scheduler_config.json"),
        r#"{"_class_name": "EulerDiscreteScheduler", "beta_schedule": "scaled_linear",
            "beta_start": 0.00085, "beta_end": 0.012, "timestep_spacing": "leading",
            "steps_offset": 1}"#,
    )
    .unwrap();
    let dir = dir.display().to_string().replace('\\', "/");
    // SD 1.5's Euler: 10 steps from 901 down by 100, noise scaled by sqrt(sigma_max^2 + 1).
    let t = eval(&format!(
        r#"let s = diffusion::scheduler("{dir}", #{{ steps: 10 }}); s.timesteps"#
    ))
    .unwrap()
    .into_typed_array::<f64>()
    .unwrap();
    assert_eq!(t[0], 901.0);
    assert_eq!(t[9], 1.0);
    let walked = values(&format!(
        r#"let s = diffusion::scheduler("{dir}", #{{ steps: 10 }});
           let x = ones([1, 2]) * s.init_noise_sigma;
           for t in s.timesteps {{ let out = s.scale_model_input(x) * 0.0; x = s.step(out, x); }}
           x"#
    ));
    // A zero prediction of the noise keeps the sample as it is: x0 = x at every step.
    let start = eval(&format!(
        r#"diffusion::scheduler("{dir}", #{{ steps: 10 }}).init_noise_sigma"#
    ))
    .unwrap()
    .as_float()
    .unwrap();
    assert!(
        (walked[0] - start).abs() < 1e-3 * start,
        "{walked:?} vs {start}"
    );
    let err = eval(&format!(
        r#"let s = diffusion::scheduler("{dir}", #{{ steps: 2 }}); let x = ones([1]); x = s.step(x, x); x = s.step(x, x); s.step(x, x)"#
    ))
    .unwrap_err();
    assert!(err.contains("walk is over"), "{err}");
    let err = eval(r#"diffusion::scheduler("no/such/dir")"#).unwrap_err();
    assert!(err.contains("no scheduler_config.json"), "{err}");
    let err = eval(r#"diffusion::scheduler(#{ _class_name: "DDIMScheduler" }, #{ stepz: 3 })"#)
        .unwrap_err();
    assert!(err.contains("did you mean `steps`"), "{err}");
}

/// An SDXL-shaped UNet (diffusers' text_time conditioning) predicts from a script as diffusers
/// does, with the pooled text and the size numbers given as a map; without them it is refused.
#[test]
fn an_sdxl_unet_predicts_with_its_added_conditioning_from_a_script() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/diffusion/unet_sdxl_shape");
    let d = dir.display();
    let src = format!(
        r#"let u = diffusion::unet("{d}");
           let want = io::load("{d}/expected.safetensors");
           let out = no_grad(|| u.predict(want.sample, want.timesteps, want.context,
               #{{ text_embeds: want.text_embeds, time_ids: want.time_ids }}));
           (out - want.output).abs().max().item()"#
    );
    let worst = eval(&src).unwrap().as_float().unwrap();
    assert!(worst < 1e-4, "largest difference {worst}");
    let err = eval(&format!(
        r#"let u = diffusion::unet("{d}"); let want = io::load("{d}/expected.safetensors");
           u.predict(want.sample, want.timesteps, want.context)"#
    ))
    .unwrap_err();
    assert!(err.contains("text_embeds"), "{err}");
}

/// An activation layer takes torch's parameters by name, prints them as torch does, and refuses
/// a parameter its activation does not take.
#[test]
fn activation_layers_take_their_parameters_by_torchs_names() {
    let y = values(
        r#"let act = nn::activation("leaky_relu", #{ negative_slope: 0.2 });
           act.forward(tensor([-1.0, 2.0]))"#,
    );
    assert!(
        (y[0] + 0.2).abs() < 1e-6 && (y[1] - 2.0).abs() < 1e-6,
        "{y:?}"
    );
    let shown = eval(r#"`${nn::activation("hardtanh", #{ min_val: -2.0, max_val: 3.0 })}`"#)
        .unwrap()
        .to_string();
    assert!(
        shown.contains("Hardtanh(min_val=-2.0, max_val=3.0)"),
        "{shown}"
    );
    let err = eval(r#"nn::activation("relu", #{ alpha: 1.0 })"#).unwrap_err();
    assert!(
        err.contains("relu takes no alpha (it has no parameters)"),
        "{err}"
    );
    let err = eval(r#"nn::activation("elu", #{ negative_slope: 0.1 })"#).unwrap_err();
    assert!(
        err.contains("elu takes no negative_slope (its parameters: alpha)"),
        "{err}"
    );
}

/// `x[i] = v`, `x[a..b] = v` and `x[i][j] = v` write rows and elements as PyTorch's do (in
/// place, seen through another handle), broadcast their value, and refuse an index out of
/// range or a value of another shape by name.
#[test]
fn integer_and_range_assignment_write_rows_and_elements() {
    let y = values(
        r#"let x = zeros([3, 4]); let alias = x;
           x[0] = 1.0; x[1..3] = tensor([1.0, 2.0, 3.0, 4.0]); x[-1][1] = 9.0; x[0..=0] = x[0] * 2.0;
           alias"#,
    );
    assert_eq!(y, [2., 2., 2., 2., 1., 2., 3., 4., 1., 9., 3., 4.]);
    let err = eval("let x = zeros([3, 4]); x[3] = 1.0;").unwrap_err();
    assert!(
        err.contains("index 3 is out of range for dim 0 of size 3"),
        "{err}"
    );
    // Ranges clamp as slices do; an inclusive end of -1 is the last row.
    let y = values(
        "let x = zeros([3, 1]); x[1..10] = 1.0; x[2..1] = 5.0; x[0..=-1] = x[0..=-1] + 1.0; x",
    );
    assert_eq!(y, [1., 2., 2.]);
    // Under no_grad a parameter is written in place, as torch.no_grad's `w -= lr * g` does.
    let y =
        values("let w = ones([2, 2]).requires_grad_(); let h = w; no_grad(|| { w[0] = 3.0; }); h");
    assert_eq!(y, [3., 3., 1., 1.]);
    let err = eval("let x = zeros([3, 4]); x[0] = tensor([1.0, 2.0]);").unwrap_err();
    assert!(
        err.contains("a value of shape [2] does not broadcast to the indexed shape [4]"),
        "{err}"
    );
}

/// `x[[i, a..b, ()]]` indexes several dims at once as PyTorch's `x[i, a:b, :]`: ints drop
/// their dim, ranges slice (inclusive ones too, negative ends from the back), `()` keeps the
/// whole dim; the same index writes a region, broadcasting the value.
#[test]
fn an_array_index_reads_and_writes_several_dims() {
    let grid = "let x = arange(0.0, 12.0).reshape([3, 4]);";
    assert_eq!(values(&format!("{grid} x[[1, -1]]")), [7.]);
    assert_eq!(values(&format!("{grid} x[[(), 2]]")), [2., 6., 10.]);
    assert_eq!(
        values(&format!("{grid} x[[0..=1, 1..=-1]]")),
        [1., 2., 3., 5., 6., 7.]
    );
    // An inclusive end before the first position selects nothing.
    assert!(values(&format!("{grid} x[[0, 0..=-6]]")).is_empty());
    // A batch of one written into a row loses its leading 1, as in PyTorch.
    assert_eq!(
        values(&format!(
            "{grid} x[1] = tensor([[9.0, 9.0, 9.0, 9.0]]); x[1]"
        )),
        [9., 9., 9., 9.]
    );
    let y = values(&format!(
        "{grid} let alias = x; x[[(), 3]] = -1.0; x[[0, 0..2]] = tensor([7.0, 8.0]); alias"
    ));
    assert_eq!(y, [7., 8., 2., -1., 4., 5., 6., -1., 8., 9., 10., -1.]);
    let err = eval(&format!("{grid} x[[0, \"a\"]]")).unwrap_err();
    assert!(
        err.contains("index 1 is a string; each is an int, a range"),
        "{err}"
    );
    let err = eval(&format!("{grid} x[[0, 4]]")).unwrap_err();
    assert!(
        err.contains("index 4 is out of range for dim 1 of size 4"),
        "{err}"
    );
    let err = eval(&format!("{grid} x[[0, 1, 2]] = 1.0;")).unwrap_err();
    assert!(
        err.contains("3 indices for a tensor of 2 dims [3, 4]"),
        "{err}"
    );
}

/// A region written with a value that needs its gradient passes gradients to the value and to
/// the elements left, as torch's `x[1, 0:2] = w` does.
#[test]
fn a_region_written_under_autograd_passes_gradients_to_the_value_and_the_rest() {
    let g = values(
        r#"let w = tensor([1.0, 2.0]).requires_grad_(); let base = ones([2, 3]).requires_grad_();
           let x = base * 3.0; x[[1, 0..2]] = w * 5.0; x.sum().backward();
           cat([w.grad, base.grad.flatten()], 0)"#,
    );
    assert_eq!(g, [5., 5., 3., 3., 3., 0., 0., 3.]);
}

/// A row written with a value that needs its gradient rebinds the tensor: the gradient reaches
/// the value and the rows left, as torch's would.
#[test]
fn a_row_written_under_autograd_passes_gradients_to_the_value_and_the_rest() {
    let g = values(
        r#"let w = tensor([1.0, 2.0]).requires_grad_(); let base = ones([3, 2]).requires_grad_();
           let x = base * 3.0; x[1] = w * 5.0; x.sum().backward();
           cat([w.grad, base.grad.flatten()], 0)"#,
    );
    assert_eq!(g, [5., 5., 3., 3., 0., 0., 3., 3.]);
}

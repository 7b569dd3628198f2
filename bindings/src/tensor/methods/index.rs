//! Indexing by index tensors: index_select, gather and scatter_add.

use crate::error::guard;
use crate::help::Api;
use rhai::INT;
use rusting_brain::Tensor;

pub fn register(api: &mut Api) {
    api.func(
        "index_select",
        "t.index_select(dim, indices) -> Tensor",
        "Entries indices (1-D ints) along dim.",
        "let emb = randn([10, 4]); let ids = tensor([1, 3, 3]); emb.index_select(0, ids)",
        |t: &mut Tensor, d: INT, i: Tensor| guard(|| t.index_select(d as isize, &i)),
    );
    api.func(
        "gather",
        "t.gather(dim, index) -> Tensor",
        "torch.gather: picks along dim by an index tensor.",
        "let logp = randn([2, 5]).log_softmax(-1); let targets = tensor([1, 4]); logp.gather(1, targets.unsqueeze(1))",
        |t: &mut Tensor, d: INT, i: Tensor| guard(|| t.gather(d as isize, &i)),
    );
    api.func(
        "scatter_add",
        "t.scatter_add(dim, index, src) -> Tensor",
        "A copy of t with src added at index along dim.",
        "let idx = tensor([0, 1, 1, 2, 0]); zeros([3]).scatter_add(0, idx, ones([5]))",
        |t: &mut Tensor, d: INT, i: Tensor, s: Tensor| guard(|| t.scatter_add(d as isize, &i, &s)),
    );
}

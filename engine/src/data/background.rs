//! An iterator of results run on its own thread, a few items ahead of its consumer: the
//! training loop's thread then only receives finished batches, while collating them (copying
//! a batch's images into one buffer, about 40 MB at 32 x 640 x 640) happens beside it.

use crate::{Error, Result};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::{sync_channel, Receiver};

/// The items of an iterator running on a background thread. Dropping it lets that thread end
/// (and drop its iterator) at its next item.
pub struct Background<T> {
    items: Receiver<Result<T>>,
}

/// Runs `iter` on a new thread named `name`, at most `depth` items ahead. A panic there comes
/// out as an error item naming `name`, then the end.
pub fn in_background<T, I>(iter: I, depth: usize, name: &'static str) -> Result<Background<T>>
where
    T: Send + 'static,
    I: Iterator<Item = Result<T>> + Send + 'static,
{
    let (tx, rx) = sync_channel(depth.max(1));
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            let run = catch_unwind(AssertUnwindSafe(|| {
                for item in iter {
                    if tx.send(item).is_err() {
                        return;
                    }
                }
            }));
            if run.is_err() {
                let _ = tx.send(Err(Error::invalid(name, "the background thread panicked")));
            }
        })
        .map_err(|e| Error::invalid(name, format!("cannot start a thread: {e}")))?;
    Ok(Background { items: rx })
}

impl<T> Iterator for Background<T> {
    type Item = Result<T>;

    fn next(&mut self) -> Option<Result<T>> {
        self.items.recv().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_arrive_in_order_and_a_panic_is_an_error_item() {
        let ok: Vec<i32> = in_background((0..5).map(Ok), 2, "test")
            .unwrap()
            .map(|r| r.unwrap())
            .collect();
        assert_eq!(ok, [0, 1, 2, 3, 4]);
        let items: Vec<Result<i32>> = in_background(
            (0..3).map(|i| if i == 2 { panic!("boom") } else { Ok(i) }),
            1,
            "test",
        )
        .unwrap()
        .collect();
        assert_eq!(items.len(), 3);
        assert!(items[2]
            .as_ref()
            .unwrap_err()
            .to_string()
            .contains("the background thread panicked"));
    }
}

//! One epoch of `YoloTrainer`, in the order of ultralytics' `_do_train`: per batch the
//! warmup settings, the forward and loss (in autocast), backward, and every `accumulate`
//! iterations a clipped optimizer step and an EMA update; after the last batch the EMA is
//! validated (metrics and losses), results.csv gets its row and `last` (and on a new best fitness, `best`) are saved.

use super::results_csv::{append_row, EpochRow};
use super::schedule::steps_at;
use super::trainer::{lock, YoloTrainer, MAX_GRAD_NORM};
use super::val_loss::{validation_losses, ValLossInputs};
use crate::data::background::{in_background, Background};
use crate::data::yolo::TrainBatch;
use crate::messages;
use crate::models::yolo::loss::DetectionTargets;
use crate::models::yolo::val::{validate, ValOptions};
use crate::nn::Module;
use crate::{DType, Device, Error, HostReader, Result};
use std::time::Instant;

/// Where an epoch stands after a batch, for a progress bar (ultralytics prints the same:
/// epoch, the running mean losses, the batch's instances and the image size).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BatchProgress {
    /// The epoch, from 0.
    pub epoch: usize,
    pub epochs: usize,
    /// Batches done in this epoch.
    pub batch: usize,
    pub batches: usize,
    /// Mean box, cls and dfl losses of the epoch so far.
    pub losses: [f64; 3],
    /// Boxes in this batch.
    pub instances: usize,
    pub imgsz: usize,
}

/// What validating the EMA after an epoch gave.
#[derive(Clone, Debug, PartialEq)]
pub struct EpochValidation {
    pub precision: f64,
    pub recall: f64,
    pub map50: f64,
    pub map: f64,
    /// ultralytics 8.4.190's fitness: mAP50-95.
    pub fitness: f64,
    /// ultralytics' per-class table.
    pub table: String,
    /// Mean box, cls and dfl loss items over the validation batches.
    pub losses: [f64; 3],
}

/// One finished epoch.
#[derive(Clone, Debug, PartialEq)]
pub struct EpochReport {
    /// The epoch, from 0.
    pub epoch: usize,
    pub epochs: usize,
    /// Mean box, cls and dfl losses over the epoch (batches with a non-finite loss left out).
    pub losses: [f64; 3],
    /// Boxes seen in the epoch.
    pub instances: usize,
    pub images: usize,
    /// The groups' rates at the end of the epoch (pg0, pg1, pg2).
    pub lrs: [f64; 3],
    pub optimizer_steps: usize,
    /// Optimizer steps skipped for a non-finite gradient norm (a batch whose loss is not
    /// finite leaves non-finite gradients, so the step it goes into is skipped).
    pub skipped: usize,
    pub validation: EpochValidation,
    /// Whether this epoch's fitness is at least the best so far (and `best` was saved).
    pub is_best: bool,
    /// Seconds since the run began (earlier sessions of a resumed run included).
    pub time: f64,
    /// Seconds this epoch's training batches took (data loading, steps; not validation): the
    /// training throughput is `images / train_seconds`.
    pub train_seconds: f64,
    /// Where the host spent `train_seconds`, phase by phase (`PHASES`). The device runs
    /// behind the host, so a phase that waits for it (the loss read, the clipped step) also
    /// holds the device time of the work queued before it.
    pub phase_seconds: [f64; PHASES.len()],
}

/// The host phases of a training batch, as `EpochReport::phase_seconds` counts them (in
/// `Phase`'s order): waiting for the loader's next batch, queuing the forward and loss
/// (schedule settings included), reading the loss items (a wait for the forward on the
/// device), queuing the backward, the clipped optimizer step, the EMA update, and the rest
/// (the progress callback).
pub const PHASES: [&str; 7] = [
    "loading",
    "forward",
    "loss_read",
    "backward",
    "optimizer",
    "ema",
    "other",
];

/// Running sums of one epoch.
struct EpochTotals {
    losses: [f64; 3],
    counted: usize,
    instances: usize,
    images: usize,
    steps: usize,
    skipped: usize,
    phases: [f64; PHASES.len()],
}

/// The entries of `PHASES`.
#[derive(Clone, Copy)]
enum Phase {
    Loading,
    Forward,
    LossRead,
    Backward,
    Optimizer,
    Ema,
    Other,
}

/// Host seconds per phase: each mark adds the time since the last one to its phase.
struct PhaseClock {
    last: Instant,
    seconds: [f64; PHASES.len()],
}

impl PhaseClock {
    fn start() -> Self {
        PhaseClock {
            last: Instant::now(),
            seconds: [0.0; PHASES.len()],
        }
    }

    fn mark(&mut self, phase: Phase) {
        let now = Instant::now();
        self.seconds[phase as usize] += (now - self.last).as_secs_f64();
        self.last = now;
    }
}

impl YoloTrainer {
    /// Trains the next epoch and validates the EMA; `progress` is called after every batch.
    /// A cancel request (Ctrl-C) stops it between batches (or validation batches), saves
    /// `last`, marked to train this epoch again, and returns `Error::Cancelled`.
    pub fn epoch(&mut self, progress: &mut dyn FnMut(&BatchProgress)) -> Result<EpochReport> {
        if self.is_finished() {
            return Err(Error::invalid(
                "yolo train",
                format!(
                    "the run is finished ({} epochs); make a new trainer (or fine-tune from \
                     best) to train more",
                    self.settings.epochs
                ),
            ));
        }
        let epoch = self.epoch;
        match self.train_and_validate(epoch, progress) {
            Err(Error::Cancelled) => {
                self.save_cancelled(epoch)?;
                Err(Error::Cancelled)
            }
            other => other,
        }
    }

    fn train_and_validate(
        &mut self,
        epoch: usize,
        progress: &mut dyn FnMut(&BatchProgress),
    ) -> Result<EpochReport> {
        let started = Instant::now();
        let totals = self.train_batches(epoch, progress)?;
        let train_seconds = started.elapsed().as_secs_f64();
        if epoch + 1 < self.settings.epochs {
            // Loading ahead is only a head start: if it cannot begin (no thread), the next
            // epoch starts its own and reports that, and this epoch still validates and saves.
            self.prefetched = self
                .start_loading(epoch + 1)
                .ok()
                .map(|batches| (epoch + 1, batches));
        }
        let lrs = self.optimizer.lrs();
        let n = totals.counted.max(1) as f64;
        let losses = totals.losses.map(|l| l / n);
        let validation = self.validate_ema()?;
        let time = self.time_before + started.elapsed().as_secs_f64();
        self.time_before = time;
        let row = EpochRow {
            epoch,
            time,
            train_losses: losses,
            metrics: [
                validation.precision,
                validation.recall,
                validation.map50,
                validation.map,
            ],
            val_losses: validation.losses,
            lrs,
        };
        append_row(&self.results_csv(), &row)?;
        self.history.push(row);
        // ultralytics raises best_fitness on a strictly better epoch but writes best whenever
        // the epoch's fitness equals it, so a tie also saves best (the newer weights).
        let is_best = self.best_fitness.is_none_or(|b| b <= validation.fitness);
        if is_best {
            self.best_fitness = Some(validation.fitness);
        }
        self.epoch += 1;
        self.save_epoch(is_best, &validation)?;
        Ok(EpochReport {
            epoch,
            epochs: self.settings.epochs,
            losses,
            instances: totals.instances,
            images: totals.images,
            lrs,
            optimizer_steps: totals.steps,
            skipped: totals.skipped,
            validation,
            is_best,
            time,
            train_seconds,
            phase_seconds: totals.phases,
        })
    }

    /// Starts loading epoch `epoch`'s batches: the loader's workers augment, a thread of its
    /// own collates two batches ahead, so the training loop's thread only runs steps.
    fn start_loading(&self, epoch: usize) -> Result<Background<TrainBatch>> {
        in_background(self.loader.epoch(epoch), 2, "yolo train loader")
    }

    fn train_batches(
        &mut self,
        epoch: usize,
        progress: &mut dyn FnMut(&BatchProgress),
    ) -> Result<EpochTotals> {
        let nb = self.schedule.batches_per_epoch;
        let mut totals = EpochTotals {
            losses: [0.0; 3],
            counted: 0,
            instances: 0,
            images: 0,
            steps: 0,
            skipped: 0,
            phases: [0.0; PHASES.len()],
        };
        let mut clock = PhaseClock::start();
        let mut loss_reader = HostReader::new();
        // The device counts skipped steps; reading its count waits, so once per epoch.
        let skipped_before = self.optimizer.skipped_steps();
        lock(&self.model).train(true);
        // Started at the end of the previous epoch, unless this is the first of the session.
        let batches = match self.prefetched.take() {
            Some((e, batches)) if e == epoch => batches,
            _ => self.start_loading(epoch)?,
        };
        let result = (|| {
            for (i, batch) in batches.enumerate() {
                clock.mark(Phase::Loading);
                crate::cancel::check()?;
                let batch = batch?;
                let ni = i + nb * epoch;
                let settings = self.schedule.at(ni);
                self.optimizer.apply(&settings)?;
                let instances = batch.batch_idx.dims()[0];
                let items = self.forward_backward(&batch, &mut loss_reader, &mut clock)?;
                if items.iter().all(|v| v.is_finite()) {
                    for (t, v) in totals.losses.iter_mut().zip(items) {
                        *t += v;
                    }
                    totals.counted += 1;
                } else {
                    messages::warn(&format!(
                        "yolo train: epoch {} batch {}: the loss is not finite ({items:?}); it \
                         is left out of the mean, and the optimizer step it goes into is \
                         skipped",
                        epoch + 1,
                        i + 1
                    ));
                }
                clock.mark(Phase::Other);
                if steps_at(ni, self.last_step, settings.accumulate) {
                    self.optimizer_step(&mut clock)?;
                    totals.steps += 1;
                    self.last_step = Some(ni);
                }
                totals.instances += instances;
                totals.images += batch.indices.len();
                let n = totals.counted.max(1) as f64;
                progress(&BatchProgress {
                    epoch,
                    epochs: self.settings.epochs,
                    batch: i + 1,
                    batches: nb,
                    losses: totals.losses.map(|l| l / n),
                    instances,
                    imgsz: self.imgsz,
                });
                clock.mark(Phase::Other);
            }
            // The wait for the loader to say the epoch is over.
            clock.mark(Phase::Loading);
            totals.phases = clock.seconds;
            let skipped = (self.optimizer.skipped_steps() - skipped_before) as usize;
            totals.skipped = skipped;
            totals.steps -= skipped.min(totals.steps);
            Ok(totals)
        })();
        lock(&self.model).eval();
        result
    }

    /// The loss of one batch and its backward; the three loss items (box, cls, dfl). The items
    /// are read back behind the forward, after the backward is queued, so the wait for them
    /// leaves the device the backward to run. A non-finite loss is backpropagated too (as
    /// ultralytics does): its gradients make the optimizer skip the step.
    fn forward_backward(
        &self,
        batch: &TrainBatch,
        loss_reader: &mut HostReader,
        clock: &mut PhaseClock,
    ) -> Result<[f64; 3]> {
        let model = lock(&self.model);
        let images = batch
            .images
            .to(self.device, DType::F32)?
            .div_scalar(255.0)?;
        let targets = batch_targets(batch)?;
        let amp = (self.settings.amp && self.device != Device::Cpu).then_some(DType::BF16);
        let out = crate::amp::autocast(amp, || {
            let head = model.forward_head(&images)?;
            self.loss.forward_head(&head, &targets)
        })?;
        loss_reader.start(&out.items)?;
        clock.mark(Phase::Forward);
        out.total.backward()?;
        clock.mark(Phase::Backward);
        let items = loss_reader
            .take()?
            .ok_or_else(|| Error::invalid("yolo train", "the loss items were not read"))?
            .to_dtype(DType::F64)?
            .to_vec::<f64>()?;
        clock.mark(Phase::LossRead);
        Ok([items[0], items[1], items[2]])
    }

    /// ultralytics' `optimizer_step`: clip at 10 over all groups, step (on CUDA the clip and a
    /// skip for a non-finite norm happen on the device, and pg0 warns about a skip once it is
    /// read), clear the gradients, update the EMA (as ultralytics does even after a skip).
    fn optimizer_step(&mut self, clock: &mut PhaseClock) -> Result<()> {
        self.optimizer.clip_and_step(MAX_GRAD_NORM)?;
        self.optimizer.zero_grad();
        clock.mark(Phase::Optimizer);
        let model = lock(&self.model);
        self.ema.update(&*model)?;
        clock.mark(Phase::Ema);
        Ok(())
    }

    /// Validates the EMA weights on the dataset's `val` split at the training size.
    fn validate_ema(&self) -> Result<EpochValidation> {
        let ema = self.ema_model()?;
        let opts = ValOptions {
            imgsz: self.imgsz,
            batch: self.loader.batch_size() * 2,
            workers: self.settings.workers,
            ..ValOptions::default()
        };
        let report = validate(&ema, &self.data, &opts, self.device, |_, _| {})?;
        let losses = validation_losses(
            &ema,
            &self.loss,
            &ValLossInputs {
                data: &self.data,
                imgsz: self.imgsz,
                batch: opts.batch,
                workers: self.settings.workers,
                device: self.device,
            },
        )?;
        let [precision, recall, map50, map] = report.metrics.mean_results();
        Ok(EpochValidation {
            precision,
            recall,
            map50,
            map,
            fitness: report.metrics.fitness(),
            table: report.table,
            losses,
        })
    }
}

/// The batch's labels as the loss takes them.
fn batch_targets(batch: &TrainBatch) -> Result<DetectionTargets> {
    let rows = batch.targets()?;
    let n = rows.dims()[0];
    let values = rows.to_vec::<f32>()?;
    let rows: Vec<[f64; 6]> = (0..n)
        .map(|i| std::array::from_fn(|j| values[i * 6 + j] as f64))
        .collect();
    DetectionTargets::from_rows(batch.indices.len(), &rows)
}

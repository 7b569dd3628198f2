//! Optimizers (SGD, AdamW, Lion), learning-rate schedules and gradient clipping.

//! Offline transcription planning: windows, batches and CTC stitching.
//!
//! Pure data structures with no threads or model calls, so every policy here is unit
//! tested on its own; the engine's workers are thin wrappers around them.
//!
//! - [`plan`]: cut each recording into overlapping windows aligned to the model's frame
//!   grid, each retaining a disjoint range of output frames.
//! - [`schedule`](mod@schedule): batch windows from *all* inputs by length under size, frame and
//!   padding bounds.
//! - [`stitch`](mod@stitch): join a recording's retained CTC frames so it is decoded once.

pub mod plan;
pub mod schedule;
pub mod stitch;

pub use plan::{plan_recording, FrameGeometry, PlanConfig, Planner, Window};
pub use schedule::{schedule, Batch, ScheduleConfig, ScheduleStats, Scheduler};
pub use stitch::stitch;

//! `-v`: `tracing` set up for ralph, and where the time of a run goes — one line on stderr for
//! every span as it closes (the run, its start-up steps, each iteration and each of its phases).
//!
//! A span's line is `time: PATH: DURATION`: the path is the spans it sits in, each written as its
//! name followed by its fields' values (`run › iteration 2 › verify`), and the duration is the
//! wall-clock time from its opening to its close — for an async phase that includes the time it
//! waited on the agent, which is where a run's time goes. Spans are `INFO`: without `-v` (or a
//! `RALPH_LOG` that enables them) they are never built, so nothing is printed.

use std::fmt::Write as _;
use std::io::Write as _;
use std::time::{Duration, Instant};

use tracing::Subscriber;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

/// The subscriber for `-v` levels (`RALPH_LOG` wins when set): events as `tracing`'s fmt writes
/// them, closed spans as [`Timing`] does.
pub(crate) fn init(verbose: u8) {
    let default = match verbose {
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let filter = EnvFilter::try_from_env("RALPH_LOG").unwrap_or_else(|_| EnvFilter::new(default));
    let events = tracing_subscriber::fmt::layer()
        .with_writer(crate::ui::diagnostics)
        .without_time();
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(events)
        .with(Timing)
        .try_init();
}

/// Prints one line per closed span: where it was and how long it was open.
struct Timing;

/// What a span's line needs, kept in the span from its opening.
struct Opened {
    at: Instant,
    label: String,
}

/// A span's label: its name, then each field's value (`iteration 2`).
struct Label(String);

impl Visit for Label {
    fn record_str(&mut self, _: &Field, value: &str) {
        let _ = write!(self.0, " {value}");
    }

    fn record_debug(&mut self, _: &Field, value: &dyn std::fmt::Debug) {
        let _ = write!(self.0, " {value:?}");
    }
}

impl<S> Layer<S> for Timing
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut label = Label(span.name().to_string());
        attrs.record(&mut label);
        span.extensions_mut().insert(Opened {
            at: Instant::now(),
            label: label.0,
        });
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        if let Some(opened) = span.extensions_mut().get_mut::<Opened>() {
            let mut label = Label(std::mem::take(&mut opened.label));
            values.record(&mut label);
            opened.label = label.0;
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(&id) else { return };
        let path: Vec<String> = span
            .scope()
            .from_root()
            .filter_map(|s| s.extensions().get::<Opened>().map(|o| o.label.clone()))
            .collect();
        let Some(took) = span.extensions().get::<Opened>().map(|o| o.at.elapsed()) else {
            return;
        };
        // A closed stderr is no reason to stop a run.
        let _ = writeln!(
            crate::ui::diagnostics(),
            "time: {}: {}",
            crate::ui::shown(&path.join(" › ")),
            precise(took)
        );
    }
}

/// `0.4ms`, `12.5ms`, `1.234s`, then as the rest of ralph writes durations (`4m 05s`): a phase
/// is often far shorter than the tenth of a second the report block shows.
fn precise(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{:.1}ms", d.as_secs_f64() * 1000.0)
    } else if d < Duration::from_secs(60) {
        format!("{:.3}s", d.as_secs_f64())
    } else {
        crate::ui::human_duration(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_keep_what_a_phase_needs() {
        assert_eq!(precise(Duration::from_micros(420)), "0.4ms");
        assert_eq!(precise(Duration::from_micros(12_500)), "12.5ms");
        assert_eq!(precise(Duration::from_millis(1234)), "1.234s");
        assert_eq!(precise(Duration::from_secs(245)), "4m 05s");
    }
}

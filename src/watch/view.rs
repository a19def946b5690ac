//! The dashboard's screen, pure: a [`Screen`] (one [`Row`] per loop) drawn into a ratatui
//! frame. A title line, the table of loops, a footer with the keys. The columns that do not fit
//! a narrow terminal are left out, least telling first, so any size draws.

use std::time::Duration;

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Cell, Paragraph, Row as TableRow, Table};

use crate::state::HaltReason;

/// What the dashboard shows, for one draw.
#[derive(Debug, Clone, Default)]
pub(crate) struct Screen {
    /// The repository the loops belong to.
    pub(crate) title: String,
    pub(crate) rows: Vec<Row>,
    /// Why the last read failed (the rows are the last good ones).
    pub(crate) error: Option<String>,
    /// The latest line ralph would have printed over the screen (a warning), shown below it.
    pub(crate) said: Option<String>,
    /// Draw in colour (not under `NO_COLOR` or `--color never`).
    pub(crate) color: bool,
}

/// One loop.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    pub(crate) name: String,
    /// `None`: a detached HEAD.
    pub(crate) branch: Option<String>,
    pub(crate) state: LoopState,
    /// Iteration n of max.
    pub(crate) iteration: Option<(u32, u32)>,
    /// Done, total and what they count (`criteria`, `tasks`, `rows`).
    pub(crate) progress: (usize, usize, &'static str),
    pub(crate) elapsed: Option<Duration>,
    pub(crate) cost_usd: f64,
    /// The agent's latest activity while running; the last `ITER` record once halted.
    pub(crate) activity: String,
}

/// Where a loop is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LoopState {
    NoRun,
    Running,
    /// Running, and waiting for a person's answer (SPEC §16).
    Waiting,
    Halted {
        reason: Option<HaltReason>,
        exit_code: Option<i32>,
    },
}

impl LoopState {
    fn text(self) -> String {
        match self {
            LoopState::NoRun => "no run".into(),
            LoopState::Running => "running".into(),
            LoopState::Waiting => "waiting for a person".into(),
            LoopState::Halted { reason, exit_code } => {
                let mut s = String::from("halted");
                if let Some(r) = reason {
                    s = format!("{s}: {r}");
                }
                if let Some(c) = exit_code {
                    s = format!("{s} (exit {c})");
                }
                s
            }
        }
    }

    fn color(self) -> Color {
        match self {
            LoopState::NoRun => Color::DarkGray,
            LoopState::Running => Color::Green,
            LoopState::Waiting => Color::Magenta,
            LoopState::Halted {
                reason: Some(HaltReason::Complete),
                ..
            } => Color::Cyan,
            LoopState::Halted {
                reason: Some(HaltReason::Interrupted),
                ..
            } => Color::Yellow,
            LoopState::Halted { .. } => Color::Red,
        }
    }
}

/// The table's columns, in display order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Col {
    Loop,
    Branch,
    State,
    Iteration,
    Progress,
    Elapsed,
    Cost,
    Activity,
}

/// Which columns stay when the terminal is narrow: the first ones, in this order.
const PRIORITY: [Col; 8] = [
    Col::Loop,
    Col::Progress,
    Col::State,
    Col::Iteration,
    Col::Activity,
    Col::Elapsed,
    Col::Branch,
    Col::Cost,
];
const SPACING: u16 = 2;
/// The least room the activity column is given; it takes whatever is left.
const ACTIVITY_MIN: u16 = 12;

impl Col {
    fn title(self) -> &'static str {
        match self {
            Col::Loop => "LOOP",
            Col::Branch => "BRANCH",
            Col::State => "STATE",
            Col::Iteration => "ITER",
            Col::Progress => "PROGRESS",
            Col::Elapsed => "ELAPSED",
            Col::Cost => "COST",
            Col::Activity => "ACTIVITY",
        }
    }

    /// The widest a column gets (names and branches can be long).
    fn cap(self) -> u16 {
        match self {
            Col::Loop | Col::Branch => 28,
            Col::State => 36,
            _ => 24,
        }
    }

    fn text(self, r: &Row) -> String {
        match self {
            Col::Loop => r.name.clone(),
            Col::Branch => r.branch.clone().unwrap_or_else(|| "(detached)".into()),
            Col::State => r.state.text(),
            Col::Iteration => r.iteration.map_or("–".into(), |(n, m)| format!("{n}/{m}")),
            Col::Progress => {
                let (done, total, unit) = r.progress;
                format!("{done}/{total} {unit}")
            }
            Col::Elapsed => r
                .elapsed
                .map_or("–".into(), |d| crate::ui::human_duration(round(d))),
            Col::Cost if r.cost_usd > 0.0 => format!("${:.2}", r.cost_usd),
            Col::Cost => "–".into(),
            Col::Activity => r.activity.clone(),
        }
    }

    fn style(self, r: &Row) -> Style {
        match self {
            Col::Loop => Style::new().add_modifier(Modifier::BOLD),
            Col::State => Style::new().fg(r.state.color()),
            Col::Activity if !matches!(r.state, LoopState::Running | LoopState::Waiting) => {
                Style::new().fg(Color::DarkGray)
            }
            _ => Style::new(),
        }
    }
}

/// Whole seconds once past the first (the clock ticks by the second).
fn round(d: Duration) -> Duration {
    if d.as_secs() == 0 {
        d
    } else {
        Duration::from_secs(d.as_secs())
    }
}

fn width(text: &str) -> u16 {
    u16::try_from(Span::raw(text).width()).unwrap_or(u16::MAX)
}

/// The columns shown in `total` cells of width and the width of each, in display order.
fn columns(rows: &[Row], total: u16) -> Vec<(Col, u16)> {
    let mut chosen: Vec<(Col, u16)> = Vec::new();
    let mut used = 0u16;
    for col in PRIORITY {
        let natural = rows
            .iter()
            .map(|r| width(&col.text(r)))
            .chain([width(col.title())])
            .max()
            .unwrap_or(0)
            .min(col.cap());
        let w = if col == Col::Activity {
            natural.min(ACTIVITY_MIN)
        } else {
            natural
        };
        let need = if chosen.is_empty() { w } else { w + SPACING };
        if used.saturating_add(need) <= total {
            chosen.push((col, w));
            used += need;
        } else {
            if chosen.is_empty() {
                chosen.push((col, total));
            }
            // A column that does not fit leaves out all less telling ones.
            break;
        }
    }
    chosen.sort();
    chosen
}

/// Draw `screen` into the whole frame.
pub(crate) fn render(frame: &mut Frame, screen: &Screen) {
    let [top, body, bottom] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(0),
        Constraint::Length(1),
    ])
    .areas(frame.area());
    let paint = |s: Style| if screen.color { s } else { Style::new() };
    let running = screen
        .rows
        .iter()
        .filter(|r| matches!(r.state, LoopState::Running | LoopState::Waiting))
        .count();
    let loops = match screen.rows.len() {
        1 => "1 loop".to_string(),
        n => format!("{n} loops"),
    };
    let title = Line::from(vec![
        Span::styled(
            "ralph watch",
            paint(Style::new().add_modifier(Modifier::BOLD)),
        ),
        Span::raw(format!("  {loops}, {running} running  {}", screen.title)),
    ]);
    frame.render_widget(Paragraph::new(title), top);
    render_table(frame, body, screen, &paint);
    let quit = Span::styled("q quit", paint(Style::new().fg(Color::DarkGray)));
    let footer = match (&screen.error, &screen.said) {
        (Some(e), _) => Line::from(Span::styled(
            format!("error: {e}"),
            paint(Style::new().fg(Color::Red)),
        )),
        (None, Some(said)) => Line::from(vec![
            quit,
            Span::styled(
                format!("  {}", crate::ui::shown(said)),
                paint(Style::new().fg(Color::Yellow)),
            ),
        ]),
        (None, None) => Line::from(quit),
    };
    frame.render_widget(Paragraph::new(footer), bottom);
}

fn render_table(frame: &mut Frame, area: Rect, screen: &Screen, paint: &dyn Fn(Style) -> Style) {
    if screen.rows.is_empty() {
        let text = "No loops in this repository: start one with `ralph run`.";
        frame.render_widget(Paragraph::new(text), area);
        return;
    }
    let cols = columns(&screen.rows, area.width);
    let widths: Vec<Constraint> = cols
        .iter()
        .map(|&(c, w)| match c {
            Col::Activity => Constraint::Min(w),
            _ => Constraint::Length(w),
        })
        .collect();
    let header = TableRow::new(cols.iter().map(|(c, _)| Cell::from(c.title()))).style(paint(
        Style::new().add_modifier(Modifier::BOLD | Modifier::UNDERLINED),
    ));
    let rows = screen.rows.iter().map(|r| {
        TableRow::new(
            cols.iter()
                .map(|&(c, _)| Cell::from(c.text(r)).style(paint(c.style(r)))),
        )
    });
    let table = Table::new(rows, widths)
        .header(header)
        .column_spacing(SPACING);
    frame.render_widget(table, area);
}

#[cfg(test)]
mod tests {
    use ratatui::Terminal;
    use ratatui::backend::TestBackend;

    use super::*;

    fn row(name: &str, state: LoopState, progress: (usize, usize), activity: &str) -> Row {
        Row {
            name: name.into(),
            branch: Some(format!("ralph/{name}")),
            state,
            iteration: Some((2, 10)),
            progress: (progress.0, progress.1, "criteria"),
            elapsed: Some(Duration::from_secs(65)),
            cost_usd: 0.5,
            activity: activity.into(),
        }
    }

    fn screen() -> Screen {
        Screen {
            title: "/home/me/project".into(),
            rows: vec![
                row("auth", LoopState::Running, (1, 3), "Bash: cargo test"),
                row(
                    "search",
                    LoopState::Halted {
                        reason: Some(HaltReason::Stalled),
                        exit_code: Some(4),
                    },
                    (2, 5),
                    "ITER 2 | 2/5 criteria",
                ),
            ],
            error: None,
            said: None,
            color: true,
        }
    }

    /// The screen drawn at `w`×`h`, one string per line.
    fn draw(screen: &Screen, w: u16, h: u16) -> Vec<String> {
        let mut t = Terminal::new(TestBackend::new(w, h)).unwrap();
        t.draw(|f| render(f, screen)).unwrap();
        let buf = t.backend().buffer();
        (0..h)
            .map(|y| {
                (0..w)
                    .map(|x| buf[(x, y)].symbol().to_string())
                    .collect::<String>()
            })
            .collect()
    }

    #[test]
    fn both_loops_with_their_progress_state_and_activity() {
        let lines = draw(&screen(), 120, 8);
        let all = lines.join("\n");
        assert!(lines[0].starts_with("ralph watch  2 loops, 1 running  /home/me/project"));
        let auth = lines.iter().find(|l| l.starts_with("auth")).expect(&all);
        for part in [
            "ralph/auth",
            "running",
            "2/10",
            "1/3 criteria",
            "1m 05s",
            "$0.50",
            "Bash: cargo test",
        ] {
            assert!(auth.contains(part), "{part} missing:\n{all}");
        }
        let search = lines.iter().find(|l| l.starts_with("search")).expect(&all);
        assert!(search.contains("halted: stalled (exit 4)"), "{all}");
        assert!(search.contains("2/5 criteria"), "{all}");
        assert!(
            lines[1].contains("LOOP") && lines[1].contains("ACTIVITY"),
            "{all}"
        );
        assert!(lines[7].starts_with("q quit"), "{all}");
    }

    #[test]
    fn a_narrow_terminal_keeps_names_and_progress() {
        let lines = draw(&screen(), 40, 6);
        let all = lines.join("\n");
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("auth") && l.contains("1/3 criteria")),
            "{all}"
        );
        assert!(!all.contains("BRANCH") && !all.contains("COST"), "{all}");
        // Room for the activity comes before the clock and the cost.
        let lines = draw(&screen(), 70, 6).join("\n");
        assert!(
            lines.contains("ACTIVITY") && !lines.contains("ELAPSED"),
            "{lines}"
        );
        // Any size draws, down to nothing.
        for (w, h) in [(1, 1), (5, 2), (12, 3), (200, 1), (0, 0)] {
            draw(&screen(), w, h);
        }
    }

    #[test]
    fn no_loops_and_a_read_error_say_so() {
        let mut s = screen();
        s.rows.clear();
        s.error = Some("state.json: schema version 9 is newer".into());
        let all = draw(&s, 100, 5).join("\n");
        assert!(all.contains("No loops in this repository"), "{all}");
        assert!(all.contains("error: state.json: schema version 9"), "{all}");
        assert!(all.contains("0 loops, 0 running"), "{all}");
    }

    #[test]
    fn monochrome_has_no_colour() {
        let mut s = screen();
        s.color = false;
        let mut t = Terminal::new(TestBackend::new(100, 5)).unwrap();
        t.draw(|f| render(f, &s)).unwrap();
        let buf = t.backend().buffer();
        assert!(buf.content().iter().all(|c| c.fg == Color::Reset));
    }

    #[test]
    fn states_read_as_words() {
        assert_eq!(LoopState::NoRun.text(), "no run");
        let h = LoopState::Halted {
            reason: Some(HaltReason::Complete),
            exit_code: Some(0),
        };
        assert_eq!(h.text(), "halted: complete (exit 0)");
        let crashed = LoopState::Halted {
            reason: None,
            exit_code: None,
        };
        assert_eq!(crashed.text(), "halted");
    }
}

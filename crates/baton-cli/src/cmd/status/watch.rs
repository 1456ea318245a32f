//! `--watch`: redrawn in place on a terminal; elsewhere the table once, then a line per change.

use std::io::Write;

use super::changes::{changes, resolve_outcomes};
use super::view::View;
use super::{describe, read_all, StatusArgs};
use crate::render;
use crate::Opened;

/// `--watch` on a terminal: redraw in place every interval until Ctrl-C.
pub(super) async fn watch_terminal(
    opened: &Opened,
    args: &StatusArgs,
    view: &View,
) -> std::io::Result<()> {
    let interrupted = crate::signals::interruption()?;
    tokio::pin!(interrupted);
    let mut out = std::io::stdout();
    // Clear once; later frames overwrite in place (no flicker), erasing what is left over.
    out.write_all(b"\x1b[2J")?;
    loop {
        let (width, height) = render::terminal_size().unwrap_or((80, 24));
        let title = format!(
            "every {} · {} · Ctrl-C to stop",
            crate::render::duration(args.interval),
            render::rfc3339_seconds(baton_client::wall_ms()),
        );
        let body = match read_all(opened, &args.prefix).await {
            // The title takes a row.
            Ok(keys) => view.table(
                &describe(opened),
                keys,
                Some((width, height.saturating_sub(1))),
            ),
            Err(failure) => format!("baton: {}\n", failure.message),
        };
        let mut lines: Vec<&str> = std::iter::once(title.as_str())
            .chain(body.lines())
            .collect();
        // Stay within the screen, or the redraw scrolls instead of overwriting.
        let room = height.saturating_sub(1).max(2);
        let more;
        if lines.len() > room {
            more = format!(
                "… {} more lines (a taller window, --state or --max-rows)",
                lines.len() - (room - 1)
            );
            lines.truncate(room - 1);
            lines.push(&more);
        }
        let mut frame = String::from("\x1b[H");
        for line in lines {
            frame.push_str(line);
            frame.push_str("\x1b[K\n");
        }
        frame.push_str("\x1b[J");
        out.write_all(frame.as_bytes())?;
        out.flush()?;
        tokio::select! {
            () = tokio::time::sleep(args.interval) => {}
            _ = &mut interrupted => return Ok(()),
        }
    }
}

/// `--watch` elsewhere: the table (or the JSON object) once, then one line per change, each
/// flushed, until Ctrl-C.
pub(super) async fn watch_changes(
    opened: &Opened,
    args: &StatusArgs,
    view: &View,
) -> std::io::Result<()> {
    let interrupted = crate::signals::interruption()?;
    tokio::pin!(interrupted);
    let mut out = std::io::stdout();
    let mut before = loop {
        match read_all(opened, &args.prefix).await {
            Ok(keys) => break keys,
            Err(failure) => eprintln!("baton: {}", render::one_line(&failure.message)),
        }
        tokio::select! {
            () = tokio::time::sleep(args.interval) => {}
            _ = &mut interrupted => return Ok(()),
        }
    };
    let first = if args.json {
        format!("{}\n", view.json(opened, before.clone()))
    } else {
        view.table(&describe(opened), before.clone(), None)
    };
    out.write_all(first.as_bytes())?;
    out.flush()?;
    let mut last_error = None;
    loop {
        tokio::select! {
            () = tokio::time::sleep(args.interval) => {}
            _ = &mut interrupted => return Ok(()),
        }
        let after = match read_all(opened, &args.prefix).await {
            Ok(keys) => keys,
            Err(failure) => {
                // Say it once, and keep watching: the store may come back.
                if last_error.as_ref() != Some(&failure.message) {
                    eprintln!("baton: {}", render::one_line(&failure.message));
                    last_error = Some(failure.message);
                }
                continue;
            }
        };
        last_error = None;
        let mut events = changes(&before, &after);
        resolve_outcomes(opened, &mut events).await;
        events.retain(|e| view.states.shows(e.held()));
        let wall_ms = baton_client::wall_ms();
        for event in &events {
            let line = if args.json {
                event.json(wall_ms).to_string()
            } else {
                event.line(wall_ms)
            };
            writeln!(out, "{line}")?;
            out.flush()?;
        }
        before = after;
    }
}

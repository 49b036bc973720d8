//! The rendered screen with its attributes, for the live view: each row as runs of cells
//! that share colours and attributes, and the cursor, read from the same vt100 emulator
//! `terminal_screen` reads (so the page and the tool never disagree).

/// A colour as the terminal has it: the default, or an index of the xterm 256-colour
/// palette. A 24-bit colour is mapped to the nearest palette entry (the page styles cells
/// by class, so it needs no inline styles).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Colour {
    #[default]
    Default,
    Indexed(u8),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Style {
    pub fg: Colour,
    pub bg: Colour,
    pub bold: bool,
    pub dim: bool,
    pub italic: bool,
    pub underline: bool,
    pub inverse: bool,
    /// The cursor is on this cell.
    pub cursor: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Span {
    pub text: String,
    pub style: Style,
}

#[derive(Debug, Clone)]
pub struct StyledScreen {
    /// One entry per row; trailing blank cells without attributes are left out.
    pub rows: Vec<Vec<Span>>,
    pub cols: u16,
    pub title: String,
}

fn colour(c: vt100::Color) -> Colour {
    match c {
        vt100::Color::Default => Colour::Default,
        vt100::Color::Idx(i) => Colour::Indexed(i),
        vt100::Color::Rgb(r, g, b) => Colour::Indexed(nearest_index(r, g, b)),
    }
}

/// The xterm palette entry nearest to an RGB colour: the 6×6×6 cube or the grey ramp.
fn nearest_index(r: u8, g: u8, b: u8) -> u8 {
    const LEVELS: [u8; 6] = [0, 95, 135, 175, 215, 255];
    let level = |v: u8| {
        (0..6)
            .min_by_key(|&i| (i32::from(LEVELS[i]) - i32::from(v)).abs())
            .unwrap_or(0)
    };
    let (ri, gi, bi) = (level(r), level(g), level(b));
    let cube = (LEVELS[ri], LEVELS[gi], LEVELS[bi]);
    let grey_step = ((u32::from(r) + u32::from(g) + u32::from(b)) / 3).saturating_sub(3) / 10;
    let grey_step = grey_step.min(23) as u8;
    let grey = 8 + 10 * grey_step;
    let distance = |(x, y, z): (u8, u8, u8)| {
        let d = |a: u8, b: u8| (i32::from(a) - i32::from(b)).pow(2);
        d(x, r) + d(y, g) + d(z, b)
    };
    if distance((grey, grey, grey)) < distance(cube) {
        232 + grey_step
    } else {
        16 + 36 * ri as u8 + 6 * gi as u8 + bi as u8
    }
}

pub fn render(screen: &vt100::Screen, title: &str) -> StyledScreen {
    let (rows, cols) = screen.size();
    let (rows, cols) = (rows.get(), cols.get());
    let cursor = (!screen.hide_cursor()).then(|| super::screen::cursor_on_screen(screen));
    let rows = (0..rows)
        .map(|row| {
            let mut spans: Vec<Span> = Vec::new();
            for col in 0..cols {
                let Some(cell) = screen.cell(row, col) else {
                    continue;
                };
                if cell.is_wide_continuation() {
                    continue;
                }
                let style = Style {
                    fg: colour(cell.fgcolor()),
                    bg: colour(cell.bgcolor()),
                    bold: cell.bold(),
                    dim: cell.dim(),
                    italic: cell.italic(),
                    underline: cell.underline(),
                    inverse: cell.inverse(),
                    cursor: cursor == Some((row, col)),
                };
                let text = match cell.contents() {
                    "" => " ",
                    text => text,
                };
                match spans.last_mut() {
                    Some(last) if last.style == style => last.text.push_str(text),
                    _ => spans.push(Span {
                        text: text.to_owned(),
                        style,
                    }),
                }
            }
            trim_blank_end(&mut spans);
            spans
        })
        .collect();
    StyledScreen {
        rows,
        cols,
        title: title.to_owned(),
    }
}

/// Drop trailing spaces that carry no attribute (they render as nothing anyway).
fn trim_blank_end(spans: &mut Vec<Span>) {
    while let Some(last) = spans.last_mut() {
        if last.style != Style::default() {
            return;
        }
        let kept = last.text.trim_end_matches(' ').len();
        if kept > 0 {
            last.text.truncate(kept);
            return;
        }
        spans.pop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn screen(bytes: &[u8]) -> StyledScreen {
        let mut parser = vt100::Parser::new(
            std::num::NonZeroU16::new(3).unwrap(),
            std::num::NonZeroU16::new(20).unwrap(),
            0,
        );
        parser.process(bytes);
        render(parser.screen(), "")
    }

    #[test]
    fn runs_share_attributes_and_the_cursor_has_its_own_cell() {
        let s = screen(b"a\x1b[31;1mred\x1b[0m b\x1b[38;2;255;0;0mx\x1b[0m\r\n\x1b[44m  \x1b[0m");
        let row: Vec<(&str, Style)> = s.rows[0]
            .iter()
            .map(|s| (s.text.as_str(), s.style))
            .collect();
        let red = Style {
            fg: Colour::Indexed(1),
            bold: true,
            ..Style::default()
        };
        let rgb = Style {
            fg: Colour::Indexed(196),
            ..Style::default()
        };
        assert_eq!(
            row,
            [
                ("a", Style::default()),
                ("red", red),
                (" b", Style::default()),
                ("x", rgb)
            ]
        );
        let blue = Style {
            bg: Colour::Indexed(4),
            ..Style::default()
        };
        let cursor = Style {
            cursor: true,
            ..Style::default()
        };
        assert_eq!(
            s.rows[1],
            [
                Span {
                    text: "  ".into(),
                    style: blue
                },
                Span {
                    text: " ".into(),
                    style: cursor
                },
            ]
        );
        assert!(s.rows[2].is_empty());
        let hidden = screen(b"x\x1b[?25l");
        assert!(hidden.rows.iter().flatten().all(|s| !s.style.cursor));
    }

    #[test]
    fn rgb_maps_to_the_nearest_palette_entry() {
        assert_eq!(nearest_index(0, 0, 0), 16);
        assert_eq!(nearest_index(255, 255, 255), 231);
        assert_eq!(nearest_index(128, 128, 128), 244);
        assert_eq!(nearest_index(0, 135, 255), 33);
    }
}

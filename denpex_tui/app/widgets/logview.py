"""The log view: Line API (ScrollView) over the merged timeline of the whole history.

Rows are the lines of every source in time order (:mod:`~denpex_tui.app.timeline`), filtered
(one rank, or the merged timeline without the console's copies of per-rank lines), plus
explanation lines opened under a traceback. Only visible rows are read back from the files and
rendered; a rendered row is cached until something that changes its look changes. Text from
logs only ever goes into ``Text``/``Strip`` objects, never into markup. Mouse selection works
like Textual's ``Log`` (offsets on the text segments; the gutter is not part of the selected text).
A line longer than the view shows ``→`` at the right edge; a line cut at read-back (longer than
``MAX_SHOW`` bytes) ends with ``…``; ``z`` wraps long lines instead.
"""

from __future__ import annotations

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.cache import LRUCache
from textual.geometry import Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.selection import Selection
from textual.strip import Strip

from textual.geometry import Region

from ..timeline import Timeline
from .logbuffer import LogBuffer, ViewLine, row_seq
from .logrender import Mark, decorate

__all__ = ["LogView", "Mark"]

class LogView(ScrollView, can_focus=True):
    COMPONENT_CLASSES = {
        "logview--gutter", "logview--cursor", "logview--initiating", "logview--collateral",
        "logview--warning", "logview--context", "logview--match", "logview--note",
    }
    DEFAULT_CSS = """
    LogView { background: $surface; scrollbar-size-horizontal: 0; }
    LogView > .logview--gutter { color: $denpex-dim; }
    LogView > .logview--cursor { background: $denpex-cursor-background; }
    LogView > .logview--initiating { color: $denpex-initiating; text-style: bold reverse; }
    LogView > .logview--collateral { color: $denpex-collateral; text-style: bold; }
    LogView > .logview--warning { color: $denpex-warning; text-style: underline; }
    LogView > .logview--context { color: $denpex-context; text-style: italic; }
    LogView > .logview--match { background: $denpex-match-background; text-style: bold; }
    LogView > .logview--note { background: $denpex-note-background; color: $foreground; }
    """
    BINDINGS = [
        Binding("up,k", "cursor(-1)", "up", show=False),
        Binding("down,j", "cursor(1)", "down", show=False),
        Binding("pageup", "cursor(-20)", "page up", show=False),
        Binding("pagedown", "cursor(20)", "page down", show=False),
        Binding("home,g", "top", "top", show=False),
        Binding("end,G", "bottom", "end (follow)", show=False),
        Binding("left", "pan(-8)", "scroll left", show=False),
        Binding("right", "pan(8)", "scroll right", show=False),
        Binding("z", "toggle_wrap", "wrap long lines on/off", show=False),
    ]

    class FollowChanged(Message):
        def __init__(self, follow: bool) -> None:
            super().__init__()
            self.follow = follow

    def __init__(self, *, timeline: Timeline | None = None, **kw) -> None:
        super().__init__(**kw)
        self.buf = LogBuffer(timeline)
        self._cache: LRUCache[tuple, Strip] = LRUCache(2048)
        self._gen = 0
        self.cursor = 0
        self.follow = True
        self.marks: dict[tuple[str, int], Mark] = {}
        self.blocks: dict[str, list[tuple[int, int, str, str, int | None]]] = {}
        self.search_text = ""
        self.search_rx = None  # compiled (str) pattern of the current search, for highlights
        self.wrap = False  # z: long lines wrapped instead of cut
        self._layout: list[tuple[int, int]] = []

    # -- data (the buffer holds it; the view keeps cursor, scroll and follow right) -----------

    @property
    def rank_filter(self) -> int | None:
        return self.buf.rank_filter

    @property
    def hide_copies(self) -> bool:
        return self.buf.hide_copies

    @property
    def row_count(self) -> int:
        return self.buf.count

    def grow(self) -> None:
        """The timeline committed more rows: show them (and nothing at all when none came)."""
        if not self.buf.sync():
            return
        self._resize()
        if self.follow:
            self.cursor = max(0, self.row_count - 1)
            self.scroll_end(animate=False, immediate=True, x_axis=False, force=True)
            self.call_after_refresh(self._keep_following)  # again once the new size is laid out
        self.refresh()

    def _keep_following(self) -> None:
        if self.follow and self.scroll_y < self.max_scroll_y:
            self.scroll_end(animate=False, immediate=True, x_axis=False, force=True)

    def set_view(self, view, rank: int | None, hide_copies: bool) -> None:
        keep = self.line_at_cursor()
        self.buf.set_view(view, rank, hide_copies)
        self._cache.clear()
        self._gen += 1
        self._resize()
        if self.follow or keep is None:
            self.cursor = max(0, self.row_count - 1)
            if self.follow:
                self.scroll_end(animate=False, immediate=True, x_axis=False, force=True)
                self.call_after_refresh(self._keep_following)
        else:
            self.goto_row(self.buf.index_near(keep[0]))
        self.refresh()

    def rebuild(self) -> None:
        self._cache.clear()
        self._gen += 1
        self._resize()
        self.refresh()

    def fit_rank(self, rank: int | None) -> None:
        """Make the gutter wide enough for ``rank`` (3-4 digit ranks ran into the pane's border)."""
        need = max(4, len(str(rank)) + 3) if rank is not None else 4  # a space, the rank, the mark, a space
        if need > self.buf.gutter:
            self.buf.gutter = need
            self.rebuild()

    def _resize(self) -> None:
        self.virtual_size = Size(max(self.buf.width, self.size.width) + self.buf.gutter + 1, self.row_count)

    def set_marks(self, marks: dict[tuple[str, int], Mark], blocks: dict) -> None:
        if marks != self.marks or blocks != self.blocks:
            self.marks, self.blocks = marks, blocks
            self._gen += 1
            self.refresh()

    def set_search(self, text: str, rx=None) -> None:
        self.search_text, self.search_rx = text, rx
        self._gen += 1
        self.refresh()

    def add_note(self, seq: int, lines: list[Text]) -> None:
        """Open ``lines`` under the row of ``seq`` and show them with as much above as fits."""
        self.buf.notes = {seq: lines}  # one explanation at a time keeps the log readable
        self._set_follow(False)
        self.rebuild()
        if self.goto_seq(seq):
            h = max(1, self.scrollable_content_region.height)
            top = self.cursor - max(3, h - len(lines) - 1)
            self.scroll_to(y=max(0, top), animate=False, immediate=True, force=True)

    def clear_notes(self) -> bool:
        if not self.buf.notes:
            return False
        self.buf.notes = {}
        self.rebuild()
        return True

    def line_at_cursor(self) -> tuple[int, ViewLine] | None:
        if not self.row_count:
            return None
        seq = row_seq(self.buf.entry(min(self.cursor, self.row_count - 1)))
        ll = self.buf.line(seq)
        return (seq, ll) if ll is not None else None

    def selected_lines(self) -> list[ViewLine]:
        """The log lines (whole) of the rows the mouse selection covers."""
        sel = self.text_selection
        n = self.row_count
        if sel is None or not n:
            return []
        a = 0 if sel.start is None else max(0, sel.start.y)
        b = n - 1 if sel.end is None else min(n - 1, sel.end.y)
        out = []
        for i in range(a, min(b, a + 2000) + 1):
            e = self.buf.entry(i)
            if isinstance(e, int) and (ll := self.buf.line(e)) is not None:
                out.append(ll)
        return out

    # -- movement ----------------------------------------------------------------------------

    def _set_follow(self, follow: bool) -> None:
        if follow != self.follow:
            self.follow = follow
            self.post_message(self.FollowChanged(follow))

    def move_cursor(self, row: int) -> None:
        self.cursor = max(0, min(row, self.row_count - 1))
        self._set_follow(self.cursor >= self.row_count - 1 and self.follow)
        self.scroll_to_region_row(self.cursor)
        self.refresh()

    def scroll_to_region_row(self, row: int) -> None:
        h = max(1, self.scrollable_content_region.height)
        if row < self.scroll_y:
            self.scroll_to(y=row, animate=False, immediate=True, force=True)
        elif row >= self.scroll_y + h:
            self.scroll_to(y=row - h + 1, animate=False, immediate=True, force=True)

    def goto_seq(self, seq: int, *, center: bool = False) -> bool:
        i = self.buf.index_of(seq)
        if i is None:
            return False
        return self.goto_row(i, center=center)

    def goto_row(self, i: int, *, center: bool = False) -> bool:
        self._set_follow(False)
        self.cursor = i
        if center:
            h = max(1, self.scrollable_content_region.height)
            self.scroll_to(y=max(0, i - h // 3), animate=False, immediate=True, force=True)
        else:
            self.scroll_to_region_row(i)
        self.refresh()
        return True

    def action_cursor(self, delta: int) -> None:
        if delta < 0:
            self._set_follow(False)
        self.move_cursor(self.cursor + delta)

    def action_pan(self, dx: int) -> None:
        """Long lines: no horizontal scrollbar (it would hide the newest line), keys instead."""
        self.scroll_to(x=max(0, min(self.scroll_x + dx, self.max_scroll_x)), animate=False, immediate=True, force=True)
        self.refresh()

    def pan_to(self, col: int, length: int = 1) -> None:
        """Scroll sideways so that columns [col, col+length) of the text are on screen."""
        w = max(1, self.scrollable_content_region.width - self.buf.gutter - 2)
        x = int(self.scroll_x)
        if col < x or col + length > x + w:
            x = max(0, col - w // 3)
            if col + length > self.buf.width:
                self.buf.width = col + length
                self._resize()
            self.scroll_to(x=x, animate=False, immediate=True, force=True)
            self.refresh()

    def action_top(self) -> None:
        self._set_follow(False)
        self.move_cursor(0)

    def action_bottom(self) -> None:
        self.follow_end()

    def follow_end(self) -> None:
        self._set_follow(True)
        self.cursor = max(0, self.row_count - 1)
        self.scroll_end(animate=False, immediate=True, x_axis=False, force=True)
        self.refresh()

    def _on_mouse_scroll_up(self, event: events.MouseScrollUp) -> None:
        self._set_follow(False)

    def on_click(self, event: events.Click) -> None:
        row = int(self.scroll_y) + event.y
        if 0 <= row < self.row_count:
            self._set_follow(False)
            self.cursor = row
            self.refresh()

    # -- rendering ---------------------------------------------------------------------------

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._cache.clear()
        self._gen += 1

    def selection_updated(self, selection: Selection | None) -> None:
        self._cache.clear()
        self.refresh()

    def get_selection(self, selection: Selection) -> tuple[str, str] | None:
        a = 0 if selection.start is None else max(0, selection.start.y)
        b = self.row_count - 1 if selection.end is None else min(self.row_count - 1, selection.end.y)
        b = min(b, a + 100_000)  # bounded: a selection is read back from the files
        text = "\n".join([""] * a + [self.buf.row_text(i) for i in range(a, b + 1)])
        return selection.extract(text), "\n"

    def render_lines(self, crop: Region) -> list[Strip]:
        if self.follow and self.scroll_y < self.max_scroll_y:  # laid out taller since: to the end again
            self.call_later(self._keep_following)
        bar = self.vertical_scrollbar
        if self.show_vertical_scrollbar and bar.position != self.scroll_y:
            # scrolled while the bar was hidden (fewer rows than the pane): its thumb would stay stale
            bar.position = self.scroll_y
        top = int(self.scroll_y) + crop.y
        self.buf.prefetch(top, top + crop.height)  # one read per run of a file, not one per row
        if self.wrap:
            self._layout = self._wrap_layout(max(1, self.scrollable_content_region.height),
                                             max(1, self.scrollable_content_region.width - self.buf.gutter))
        return super().render_lines(crop)

    def action_toggle_wrap(self) -> None:
        self.wrap = not self.wrap
        self._cache.clear()
        self._gen += 1
        if self.wrap:
            self.scroll_to(x=0, animate=False, immediate=True, force=True)
        self.refresh()
        self.notify("long lines " + ("wrapped" if self.wrap else "cut (→ marks more; ← → pan)"), timeout=2)

    def _pieces(self, row: int, room: int) -> int:
        e = self.buf.entry(row)
        if isinstance(e, tuple):
            return 1
        ll = self.buf.line(e)
        w = 0 if ll is None else cell_len(ll.text.expandtabs(8)) + (2 if ll.cut else 0)
        return max(1, -(-w // room))

    def _wrap_layout(self, h: int, room: int) -> list[tuple[int, int]]:
        """(row, piece) for each screen line: from the top row, or ending with the last line when
        following (the newest line is always in view)."""
        n = self.row_count
        if not n:
            return []
        if self.follow:
            out: list[tuple[int, int]] = []
            r = n - 1
            while r >= 0 and len(out) < h:
                out[:0] = [(r, i) for i in range(self._pieces(r, room))]
                r -= 1
            return out[-h:]
        out, r = [], int(self.scroll_y)
        while r < n and len(out) < h:
            out.extend((r, i) for i in range(self._pieces(r, room)))
            r += 1
        return out[:h]

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        row = scroll_y + y
        piece = None
        width = self.scrollable_content_region.width
        if self.wrap:
            if y >= len(self._layout):
                return Strip.blank(width, self.rich_style)
            row, piece = self._layout[y]
            scroll_x = 0
        if row >= self.row_count:
            return Strip.blank(width, self.rich_style)
        sel = self.text_selection
        key = (self.buf.entry(row), row, scroll_x, width, row == self.cursor, self.has_focus, self._gen, piece)
        if sel is None and key in self._cache:
            return self._cache[key]
        strip = self._render_row(row, scroll_x, width, sel, piece)
        if sel is None:
            self._cache[key] = strip
        return strip

    def _style(self, name: str) -> Style:
        return self.get_component_rich_style(name, partial=True)

    def _render_row(self, row: int, scroll_x: int, width: int, sel: Selection | None,
                    piece: int | None = None) -> Strip:
        base = self.rich_style
        entry = self.buf.entry(row)
        line_style = base + self._style("logview--cursor") if row == self.cursor and self.has_focus else base
        gw = self.buf.gutter
        if isinstance(entry, tuple):
            body = self.buf.notes[entry[0]][entry[1]].copy()
            line_style = base + self._style("logview--note")
            gutter = Text(" " * (gw - 2) + "┃ ", style=line_style + self._style("logview--note"))
        else:
            ll = self.buf.line(entry)
            if ll is None:
                return Strip.blank(width, base)
            rank = self.buf.rank_of(ll)
            if rank is not None and len(str(rank)) + 3 > gw:  # a rank wider than the gutter: widen it
                gw = self.buf.gutter = len(str(rank)) + 3
                self.call_later(self.rebuild)
            body, gutter = decorate(ll, rank, gw, self.marks, self.blocks, self.search_rx, self._style)
            if body.cell_len > self.buf.width:
                self.buf.width = body.cell_len
                self.call_later(self._resize)
        body.stylize_before(line_style)
        if sel is not None and (span := sel.get_span(row)) is not None:
            a, b = span
            body.stylize(self.screen.get_component_rich_style("screen--selection"), a, len(body) if b == -1 else b)
        console = self.app.console
        bstrip = Strip(body.render(console), body.cell_len)
        room = max(0, width - gw)
        if piece is not None:  # wrapped: this screen line's piece of the line
            scroll_x = piece * room
            if piece:
                gutter = Text(" " * (gw - 2) + "↪ ", style=self._style("logview--gutter"))
        more = piece is None and bstrip.cell_length > scroll_x + room
        bstrip = bstrip.crop_extend(scroll_x, scroll_x + room, line_style)
        if more and room > 1:  # the line goes on beyond the right edge
            bstrip = Strip.join([bstrip.crop(0, room - 1), Strip([Segment("→", line_style + self._style("logview--gutter"))], 1)])
        bstrip = bstrip.apply_offsets(scroll_x, row)
        gutter.stylize_before(line_style)
        meta = Style.from_meta({"offset": (0, row)})
        gsegs = [Segment(ch, (seg.style or Style.null()) + meta)
                 for seg in gutter.render(console) for ch in seg.text]
        return Strip.join([Strip(gsegs, gw), bstrip])

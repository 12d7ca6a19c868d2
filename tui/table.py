"""A virtual table: rows are formatted off the main thread, only visible lines are drawn.

DataTable re-measures every cell on each update; a fleet of 2,000 VMs refreshed every
second would spend the whole frame budget there. Here the worker hands over formatted
cells and the column widths, and the main thread only filters (k9s `/`: a regex,
`!` inverts), sorts on precomputed keys and turns the ~40 visible rows into strips.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from rich.segment import Segment
from rich.style import Style
from textual.binding import Binding
from textual.geometry import Region, Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from db2vtop.tui.chart import style

Run = tuple[str, str | None]
Cell = str | Run | list[Run]  # plain text, one styled run, or several (a sparkline)


@dataclass(frozen=True)
class Column:
    name: str
    width: int = 0  # 0: as wide as the widest value (up to max_width)
    right: bool = False
    max_width: int = 40
    descending: bool = False  # the natural first sort order (numbers: highest first)
    sortable: bool = True
    min_width: int = 0  # a text column that gives way (down to this) before columns are cut at the edge
    whole: bool = False  # drawn whole or not at all (a trend cut at the edge would show its oldest part only)
    keep: int = 0  # a key column (the Fleet's finding): at least this much of it stays in sight, before numbers


class TableRow:
    """One row: its cells, one sort key per column (comparable or None), what `/` matches (the text cells when
    empty). `make(*args)` instead of cells: they are made when first asked for (drawn, measured), so a 10,000-row
    table whose figures all moved formats the rows on screen, not every row (and holds no list per row meanwhile)."""

    __slots__ = ("_cells", "_make", "args", "key", "search", "sort", "style")

    def __init__(self, key: str, cells: list[Cell] | None = None, sort: tuple = (), search: str = "",
                 style: str | None = None, make: Callable[..., list[Cell]] | None = None, args: tuple = ()):
        self.key, self.sort, self.search, self.style = key, sort, search, style
        self._cells = cells if cells is not None or make is not None else []
        self._make, self.args = make, args  # what `make` is called with (kept: to tell whether a row is the same)

    @property
    def cells(self) -> list[Cell]:
        make = self._make
        if make is not None:  # the loader (a trend cell) and the main thread (drawing) may both ask: made once
            cells = make(*self.args)
            if self._make is make:
                self._cells, self._make = cells, None
        return self._cells

    @property
    def made(self) -> bool:
        """Whether the cells are made (asking for them would make them)."""
        return self._make is None

    def __repr__(self) -> str:
        return f"TableRow({self.key!r}, {self.cells!r})"


@dataclass
class TableModel:
    columns: list[Column]
    rows: list[TableRow] = field(default_factory=list)
    widths: list[int] = field(default_factory=list)
    #: the rows arranged by the loader, and for which (filter, sort column, reverse): the main thread takes them
    #: as they are if its table still is so arranged, instead of filtering and sorting 10,000 rows again
    arranged: tuple[tuple[str, int | None, bool], list[TableRow]] | None = None

    def __post_init__(self) -> None:
        self.columns = list(self.columns)  # headers may be rewritten (a trend's scale): never the caller's list
        if not self.widths:
            self.widths = measure(self.columns, self.rows)


def cell_text(cell: Cell) -> str:
    if isinstance(cell, str):
        return cell
    if isinstance(cell, tuple):
        return cell[0]
    return "".join(t for t, _ in cell)


def measure(columns: Sequence[Column], rows: Sequence[TableRow]) -> list[int]:
    return fitted_widths(columns, {i: max((len(cell_text(r.cells[i])) for r in rows if i < len(r.cells)), default=0)
                                   for i, c in enumerate(columns) if not c.width})


def fitted_widths(columns: Sequence[Column], longest: dict[int, int]) -> list[int]:
    """Each column's width: its own, or (width 0) as wide as its longest text (`longest` by column), up to its
    max_width, never narrower than its name."""
    return [c.width or min(max(len(c.name), longest.get(i, 0)), c.max_width) for i, c in enumerate(columns)]


def matcher(text: str):
    """k9s filter semantics: a case-insensitive regex (plain text if it is not one), `!` inverts."""
    inverse = text.startswith("!")
    body = text[1:] if inverse else text
    try:
        rx = re.compile(body, re.IGNORECASE)
        found = rx.search
    except re.error:
        low = body.lower()
        found = lambda s: low in s.lower()  # noqa: E731
    return (lambda s: not found(s)) if inverse else (lambda s: bool(found(s)))


_REGEX = set(".^$*+?{}[]\\|()")


def narrows(before: str, after: str) -> bool:
    """Whether every row `after` keeps, `before` kept too: plain text typed on (no `!`, nothing a regex reads
    otherwise), so a filter typed key by key looks only at the rows the last key left."""
    return (after.startswith(before) and not before.startswith("!") and not after.startswith("!")
            and not _REGEX.intersection(after))


def filtered(rows: list[TableRow], filter_text: str) -> list[TableRow]:
    """The rows a filter keeps, in their order."""
    if not filter_text:
        return rows
    keep = matcher(filter_text)
    return [r for r in rows if keep(r.search or " ".join(cell_text(c) for c in r.cells))]


def arrange(rows: list[TableRow], filter_text: str, sort_col: int | None, reverse: bool) -> list[TableRow]:
    """The rows the table shows: filtered, then sorted (missing values last in either order)."""
    rows = filtered(rows, filter_text)
    if sort_col is not None:
        present = [r for r in rows if sort_col < len(r.sort) and r.sort[sort_col] is not None]
        missing = [r for r in rows if not (sort_col < len(r.sort) and r.sort[sort_col] is not None)]
        present.sort(key=lambda r: r.sort[sort_col], reverse=reverse)
        rows = present + missing
    return rows


def fit(widths: Sequence[int], columns: Sequence[Column], hidden: frozenset[str], room: int) -> list[int]:
    """The widths a table of `room` cells draws: hidden columns 0 (not drawn), and when the rest
    is wider than the room, the columns with a `min_width` give way first, down to it (a cell
    then ends in …); a `whole` column that still does not fit is left out (the others fitted again without
    it); a key column (`keep`) pushed past the edge leaves the number columns just before it out, nearest
    first, until `keep` cells of it show (k9s and htop keep theirs); whatever else does not fit is cut at the
    right edge, as in esxtop."""
    out = [0 if c.name.split(" ≤")[0] in hidden else w for c, w in zip(columns, widths, strict=False)]
    while True:
        fitted = list(out)
        over = sum(w + 1 for w in fitted if w) - room
        for i, c in enumerate(columns):
            if over <= 0:
                break
            if fitted[i] and c.min_width and fitted[i] > c.min_width:
                give = min(over, fitted[i] - c.min_width)
                fitted[i] -= give
                over -= give
        x, cut = 0, None
        for i, w in enumerate(fitted):
            if w and i < len(columns) and columns[i].whole and x + w > room:
                cut = i
                break
            x += w + 1 if w else 0
        if cut is None:
            cut = _make_room_for_key(fitted, columns, room)
            if cut is None:
                return fitted
        out[cut] = 0


def _make_room_for_key(widths: Sequence[int], columns: Sequence[Column], room: int) -> int | None:
    """The number column to leave out so that a key column shows `keep` cells, or None (none needed or left)."""
    x = 0
    for i, w in enumerate(widths):
        if w and i < len(columns) and columns[i].keep and x + min(w, columns[i].keep) > room:
            return next((j for j in range(i - 1, -1, -1) if widths[j] and columns[j].right and not columns[j].keep),
                        None)
        x += w + 1 if w else 0
    return None


def row_strip(row: TableRow, widths: Sequence[int], columns: Sequence[Column]) -> Strip:
    segments: list[Segment] = []
    base = row.style
    for i, w in enumerate(widths):
        if not w:
            continue  # a hidden column
        cell = row.cells[i] if i < len(row.cells) else ""
        runs = [(cell, base)] if isinstance(cell, str) else [cell] if isinstance(cell, tuple) else cell
        length, parts = 0, []
        for text, st in runs:
            if length + len(text) > w:
                text = text[: max(0, w - length - 1)] + "…" if w - length > 0 else ""
            if text:
                parts.append(Segment(text, style(st or base)))
                length += len(text)
        pad = Segment(" " * (w - length))
        segments += [pad, *parts] if columns[i].right else [*parts, pad]
        segments.append(Segment(" "))
    return Strip(segments)


class GridTable(ScrollView, can_focus=True, inherit_bindings=False):
    """A sortable, filterable table; ←/→ home/end stay with the app (time travel)."""

    BINDINGS: ClassVar = [
        Binding("up,k", "cursor(-1)", "Up", show=False),
        Binding("down,j", "cursor(1)", "Down", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
        Binding("enter", "select", "Open", show=False),
    ]
    DEFAULT_CSS = """
    GridTable { height: 1fr; overflow-x: hidden; }
    """

    class Highlighted(Message):
        def __init__(self, table: GridTable, key: str | None):
            super().__init__()
            self.table, self.key = table, key

    class Selected(Message):
        def __init__(self, table: GridTable, key: str):
            super().__init__()
            self.table, self.key = table, key

    class Scrolled(Message):
        """The visible rows changed: a screen that fills cells for visible rows only reloads."""

    def __init__(self, columns: Sequence[Column] = (), *, id: str | None = None, cursor: bool = True):
        super().__init__(id=id)
        self.model = TableModel(list(columns))
        self.shown: list[TableRow] = []
        self.filter_text = ""
        self.sort_col: int | None = None
        self.sort_reverse = False
        self.cursor = 0
        #: the user moved the cursor: from then on it follows its row when rows move (a sort, new data); until
        #: then it stays on the top row, whatever the first frames held (htop, k9s)
        self.moved = False
        self.show_cursor = cursor
        self.empty_text = ""
        self.hidden: frozenset[str] = frozenset()  # column names the field chooser took off
        self._fitted: tuple[tuple, list[int]] | None = None
        self._arranged_for: tuple[str, int | None, bool] | None = None  # what `shown` was filtered and sorted by
        self._strips: dict[tuple, Strip] = {}
        self._base: Style | None = None
        self._header: Strip | None = None

    # --- data -------------------------------------------------------------------------

    def set_model(self, model: TableModel) -> None:
        key = self.cursor_key
        self.model = model
        self._header = None
        self._rearrange(key)

    def set_filter(self, text: str) -> None:
        key = self.cursor_key
        if self._arranged_for == (self.filter_text, self.sort_col, self.sort_reverse) and \
                narrows(self.filter_text, text):
            self.filter_text = text  # typed on: the rows shown, still in order, less those the new text drops
            self._show(filtered(self.shown, text), key)
            return
        self.filter_text = text
        self._rearrange(key)

    def set_hidden(self, names: frozenset[str]) -> None:
        self.hidden = frozenset(names)
        self._header = None
        self._rearrange(self.cursor_key)

    def widths(self) -> list[int]:
        """The drawn widths at the table's current size (see `fit`)."""
        key = (self.size.width, self.hidden, tuple(self.model.widths), id(self.model))
        if self._fitted is None or self._fitted[0] != key:
            self._fitted = (key, fit(self.model.widths, self.model.columns, self.hidden, self.size.width))
            self._strips.clear()
            self._header = None
        return self._fitted[1]

    def set_sort(self, col: int | None, reverse: bool) -> None:
        self.sort_col, self.sort_reverse = col, reverse
        self._header = None
        self._rearrange(self.cursor_key)

    def _rearrange(self, key: str | None) -> None:
        state = (self.filter_text, self.sort_col, self.sort_reverse)
        done = self.model.arranged
        self._show(done[1] if done is not None and done[0] == state else arrange(self.model.rows, *state), key)

    def _show(self, shown: list[TableRow], key: str | None) -> None:
        self.shown = shown
        self._arranged_for = (self.filter_text, self.sort_col, self.sort_reverse)
        self._strips.clear()
        if key is not None and self.moved:
            self.cursor = next((i for i, r in enumerate(self.shown) if r.key == key), self.cursor)
        self.cursor = max(0, min(self.cursor, len(self.shown) - 1))
        says = not self.shown and bool(self.filter_text or self.empty_text)  # a line for "no row matches /x"
        self.virtual_size = Size(self.size.width, len(self.shown) + 1 + says)
        self.refresh()

    @property
    def cursor_key(self) -> str | None:
        return self.shown[self.cursor].key if 0 <= self.cursor < len(self.shown) else None

    def visible_range(self) -> tuple[int, int]:
        """Indices into `shown` of the rows on screen (plus one screen either side)."""
        first = int(self.scroll_y)
        height = max(self.size.height - 1, 1)
        return max(0, first - height), first + 2 * height

    # --- rendering ----------------------------------------------------------------------

    def render_lines(self, crop: Region) -> list[Strip]:
        self._base = self.rich_style  # a computed property: once per paint, not once per line
        return super().render_lines(crop)

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        base = self._base or self.rich_style
        widths = self.widths()
        if y == 0:
            if self._header is None:
                self._header = self._header_strip()
            return self._header.crop_extend(0, width, base)
        index = int(self.scroll_y) + y - 1
        if index >= len(self.shown):
            empty = f"no row matches /{self.filter_text}" if self.filter_text and self.model.rows else self.empty_text
            if index == 0 and empty:
                return Strip([Segment(empty, style("italic"))]).crop_extend(0, width, base)
            return Strip.blank(width, base)
        # focus shows on the cursor's row alone: `/` moving it to the filter bar draws that row again, not all
        cursor = self.has_focus if self.show_cursor and index == self.cursor else None
        key = (index, width, cursor, base)
        strip = self._strips.get(key)
        if strip is None:
            strip = row_strip(self.shown[index], widths, self.model.columns)
            if cursor is not None:
                strip = strip.apply_style(_CURSOR_FOCUSED if cursor else _CURSOR)
            strip = self._strips[key] = strip.crop_extend(0, width, base).apply_style(base)
        return strip

    def _header_strip(self) -> Strip:
        segments = []
        for i, (c, w) in enumerate(zip(self.model.columns, self.widths(), strict=False)):
            if not w:
                continue
            name = c.name
            arrow = ("▼" if self.sort_reverse else "▲") if i == self.sort_col else ""
            if len(name) + len(arrow) > w:  # cut; the sort's arrow stays, in the place of the …
                name = name[: w - 1] + (arrow or "…")
            else:
                name += arrow
            name = name.rjust(w) if c.right else name.ljust(w)
            segments += [Segment(name, _HEADER), Segment(" ", _HEADER)]
        return Strip(segments)

    # --- navigation ---------------------------------------------------------------------

    def action_cursor(self, step: int) -> None:
        self.move_cursor(self.cursor + step)

    def action_page(self, step: int) -> None:
        self.move_cursor(self.cursor + step * max(1, self.size.height - 2))

    def move_cursor(self, index: int) -> None:
        if not self.shown:
            return
        before = int(self.scroll_y)
        self.moved = True
        self.cursor = max(0, min(index, len(self.shown) - 1))
        rows = max(self.size.height - 1, 1)
        if self.cursor < self.scroll_y:
            self.scroll_to(y=self.cursor, animate=False, immediate=True)
        elif self.cursor >= self.scroll_y + rows:
            self.scroll_to(y=self.cursor - rows + 1, animate=False, immediate=True)
        self.refresh()
        self.post_message(self.Highlighted(self, self.cursor_key))
        if int(self.scroll_y) != before:
            self.post_message(self.Scrolled())

    def watch_scroll_y(self, old: float, new: float) -> None:
        super().watch_scroll_y(old, new)
        if round(old) != round(new):
            self.post_message(self.Scrolled())

    def action_select(self) -> None:
        key = self.cursor_key
        if key is not None:
            self.post_message(self.Selected(self, key))

    def on_click(self, event) -> None:  # a header click sorts by that column, a row click moves the cursor
        if event.y == 0:
            x = event.x
            for i, w in enumerate(self.widths()):
                if not w:
                    continue
                if x < w + 1:
                    self.set_sort(i, not self.sort_reverse if self.sort_col == i else True)
                    return
                x -= w + 1
        else:
            self.move_cursor(int(self.scroll_y) + event.y - 1)


_HEADER = Style(bold=True, underline=True)
_CURSOR = Style(reverse=True, dim=True)
_CURSOR_FOCUSED = Style(reverse=True)

"""Where the screens look on the time axis: live, paused, scrubbed, or replaying.

Every pane reads the same window [end - window, end], so all layers stay aligned.
Live follows the clock; any scrub leaves live mode; replay starts at the recording's
beginning and plays forward on demand, at 1x, 10x or 60x, and stops at its end: a recording
has no "live".
"""

from __future__ import annotations

from dataclasses import dataclass

from db2vtop.agent.core.units import format_duration

WINDOWS = (60.0, 300.0, 900.0, 3600.0, 4 * 3600.0, 24 * 3600.0)
SCRUB_FRACTION = 0.1  # one ←/→ press moves a tenth of the window
SPEEDS = (1.0, 10.0, 60.0)  # replay: real time, an hour in six minutes, an hour in one


@dataclass
class TimeCursor:
    window_s: float = 300.0
    live: bool = True
    playing: bool = False
    end_ns: int = 0
    first_ns: int | None = None  # the recording's start, when known (replay; `home` in watch)
    last_ns: int | None = None  # a replay's end: set, the cursor never goes live
    speed: float = 1.0

    @classmethod
    def replay(cls, first_ns: int, last_ns: int, window_s: float = 300.0) -> TimeCursor:
        return cls(window_s=window_s, live=False, end_ns=min(first_ns + int(window_s * 1e9), last_ns),
                   first_ns=first_ns, last_ns=last_ns)

    def end(self, now_ns: int) -> int:
        return now_ns if self.live else self.end_ns

    def since(self, now_ns: int) -> int:
        return self.end(now_ns) - int(self.window_s * 1e9)

    @property
    def recording(self) -> bool:
        """A replay: its end is fixed, and play stops there."""
        return self.last_ns is not None

    def toggle(self, now_ns: int) -> None:
        """Space: pause/resume when live; play/pause a replay (from its start again once at its end)."""
        if self.live:
            self.live, self.end_ns = False, now_ns
        elif self.recording:
            if not self.playing and self.last_ns is not None and self.end_ns >= self.last_ns:
                self.jump_start(now_ns)
            self.playing = not self.playing
        else:
            self.go_live()

    def set_speed(self, step: int) -> float:
        """`<` `>`: the next replay speed down or up (1x, 10x, 60x)."""
        i = SPEEDS.index(self.speed) if self.speed in SPEEDS else 0
        self.speed = SPEEDS[max(0, min(len(SPEEDS) - 1, i + step))]
        return self.speed

    def go_live(self) -> None:
        self.live, self.playing = True, False

    def scrub(self, steps: int, now_ns: int) -> None:
        end = self.end(now_ns) + int(steps * self.window_s * SCRUB_FRACTION * 1e9)
        self.live, self.playing = False, False
        self.end_ns = self._clamp(end, now_ns)

    def jump_start(self, now_ns: int) -> None:
        """Home: the first window of the recording (the store's first sample, paused)."""
        if self.first_ns is not None:
            self.live, self.playing = False, False
            self.end_ns = self._clamp(self.first_ns + int(self.window_s * 1e9), now_ns)

    def jump_end(self, now_ns: int) -> None:
        """End (of a replay): the last window of the recording."""
        self.live, self.playing = False, False
        self.end_ns = self._clamp(self.last_ns if self.last_ns is not None else now_ns, now_ns)

    def goto(self, end_ns: int, now_ns: int) -> None:
        """`:goto`: put the window's end at a moment (within the recording, never in the future)."""
        self.live, self.playing = False, False
        self.end_ns = self._clamp(end_ns, now_ns)

    def set_window(self, seconds: float) -> None:
        """`:zoom`: the window asked for, from the smallest zoom step to the largest (a ValueError else)."""
        if not WINDOWS[0] <= seconds <= WINDOWS[-1]:
            raise ValueError(f"zoom is a window from {format_duration(WINDOWS[0])} to {format_duration(WINDOWS[-1])}"
                             f" (zoom 2h), not {format_duration(seconds)}")
        self.window_s = float(seconds)

    def zoom(self, step: int) -> None:
        """`+` `-`: the next zoom step in (-1) or out (1) from the window, whichever it is."""
        if step > 0:
            self.window_s = next((w for w in WINDOWS if w > self.window_s), WINDOWS[-1])
        else:
            self.window_s = next((w for w in reversed(WINDOWS) if w < self.window_s), WINDOWS[0])

    def advance(self, dt_s: float, now_ns: int) -> None:
        """Playing: move forward in step with the wall clock; stop at the end of the recording."""
        if self.playing and not self.live:
            self.end_ns = self._clamp(self.end_ns + int(dt_s * self.speed * 1e9), now_ns)
            if self.last_ns is not None and self.end_ns >= self.last_ns:
                self.playing = False

    def _clamp(self, end: int, now_ns: int) -> int:
        high = self.last_ns if self.last_ns is not None else now_ns
        low = self.first_ns if self.first_ns is not None else end
        return max(min(end, high), min(low, high))

    def describe(self) -> str:
        if self.live:
            return "live"
        if not self.playing:
            return "paused"
        return "playing" if self.speed == 1 else f"playing {self.speed:g}×"

from db2vtop.tui.timecursor import TimeCursor

NOW = 1_700_000_000 * 10**9
S = 10**9


def test_live_pause_resume_and_scrub():
    c = TimeCursor()
    assert c.end(NOW) == NOW and c.since(NOW) == NOW - 300 * S and c.describe() == "live"
    c.toggle(NOW)
    assert not c.live and c.end(NOW + 50 * S) == NOW and c.describe() == "paused"
    c.scrub(-1, NOW)
    assert c.end(NOW) == NOW - 30 * S
    c.scrub(+20, NOW)  # never into the future
    assert c.end(NOW) == NOW
    c.toggle(NOW)  # no recording bounds: resuming means live again
    assert c.live


def test_zoom_steps_through_the_windows_and_stops_at_the_ends():
    c = TimeCursor()
    c.zoom(+1)
    assert c.window_s == 900
    for _ in range(10):
        c.zoom(+1)
    assert c.window_s == 24 * 3600
    for _ in range(10):
        c.zoom(-1)
    assert c.window_s == 60


def test_replay_starts_at_the_beginning_and_plays_to_the_end():
    first, last = NOW - 3600 * S, NOW - 600 * S
    c = TimeCursor.replay(first, last)
    assert not c.live and c.end(NOW) == first + 300 * S
    c.toggle(NOW)
    assert c.playing and c.describe() == "playing"
    c.advance(60, NOW)
    assert c.end(NOW) == first + 360 * S
    c.advance(10**6, NOW)
    assert c.end(NOW) == last and not c.playing
    c.scrub(-1000, NOW)
    assert c.end(NOW) == first
    c.jump_start(NOW)
    assert c.end(NOW) == first + 300 * S

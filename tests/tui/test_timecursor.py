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


def test_replay_speeds_and_play_never_runs_into_live():
    first, last = NOW - 3600 * S, NOW - 600 * S
    c = TimeCursor.replay(first, last)
    assert c.set_speed(+1) == 10 and c.set_speed(+1) == 60 and c.set_speed(+1) == 60
    c.toggle(NOW)
    assert c.describe() == "playing 60×"
    c.advance(2, NOW)  # two wall-clock seconds at 60x: two minutes of the recording
    assert c.end(NOW) == first + 300 * S + 120 * S
    assert c.set_speed(-1) == 10 and c.set_speed(-5) == 1
    c.advance(10**6, NOW)
    assert c.end(NOW) == last and not c.playing and not c.live
    c.toggle(NOW)  # space at the end plays the recording again from its start, never "live"
    assert c.playing and not c.live and c.end(NOW) == first + 300 * S
    c.jump_end(NOW)
    c.toggle(NOW + 3600 * S)
    assert not c.live and c.end(NOW + 3600 * S) <= last


def test_home_in_watch_goes_to_the_first_sample_once_it_is_known():
    c = TimeCursor()
    c.jump_start(NOW)  # the start is not known yet: nothing moves
    assert c.live
    c.first_ns = NOW - 90 * S  # what the app reads from the store
    c.jump_start(NOW)
    assert not c.live and c.end(NOW) == NOW  # the first 5-minute window ends now: clamped
    c.set_window(60)
    c.jump_start(NOW)
    assert c.end(NOW) == NOW - 30 * S
    c.goto(NOW - 3600 * S, NOW)  # before the recording: its start
    assert c.end(NOW) == NOW - 90 * S
    c.toggle(NOW)  # watch: space from the past resumes live
    assert c.live

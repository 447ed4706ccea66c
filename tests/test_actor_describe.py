"""What the model is told about a DataFrame: a frame's description is kept between runs, and never stale.

Each run's system prompt describes the namespace's frames (type, shape, dtypes, first rows). A frame's
description is kept and given again while nothing it says could differ; these tests change what it says in
every way a person can without making a new object, and look at the next description."""

import datetime
import decimal

import numpy as np
import pandas as pd
import pytest

import unity_nb as u


def first_prompt(ns, task="look"):
    """The system prompt of a one-plan actor run over ``ns`` (what the model saw first)."""
    seen = []

    def script(messages, tools):
        if not any(m["role"] == "tool" for m in messages):
            seen.append(messages[0]["content"])
            return u.call_tool("execute_code", code="pass", intent="nothing")
        return "done"

    return seen, script


async def run_and_read(ns):
    seen, script = first_prompt(ns)
    await u.act("look", model=u.ScriptedModel(script), namespace=ns)
    return seen[0]


def frame():
    n = np.arange(50_000)
    return pd.DataFrame({
        "id": n, "value": n / 8, "kind": pd.Categorical(np.array(["a", "b", "c"])[n % 3]),
        "name": np.array(["ann", "bob", "cy"])[n % 3], "obj": pd.Series(["p", "q", "r"] * 16_666 + ["p", "q"],
                                                                         dtype=object),
    })


async def test_a_cell_written_in_place_shows_in_the_next_run_s_description():
    ns = {"sales": frame()}
    before = await run_and_read(ns)
    assert "0.125" in before and "7777.5" not in before
    assert before == await run_and_read(ns)  # nothing changed: the same words
    ns["sales"].iat[1, 1] = 7777.5  # the frame, its blocks and its shape all stay
    after = await run_and_read(ns)
    assert "7777.5" in after and "0.125" not in after


def described(df):
    """The description, each line's runs of spaces made one (the layout's widths are not what is tested)."""
    return "\n".join(" ".join(line.split()) for line in u.actor.describe_value(df).splitlines())


@pytest.mark.parametrize(
    ("change", "shows"),
    [
        (lambda df: df.iat.__setitem__((0, 0), 424242), "424242"),  # int64 block, written in place
        (lambda df: df.iat.__setitem__((2, 1), -31.5), "-31.5"),  # float64
        (lambda df: df.iat.__setitem__((1, 2), "c"), "1 1 0.125 c bob"),  # a category's code
        (lambda df: df.iat.__setitem__((0, 3), "zelda"), "zelda"),  # str (an object array under it)
        (lambda df: df.iat.__setitem__((1, 4), "wxyz"), "wxyz"),  # object dtype
        (lambda df: setattr(df.index, "name", "row_no"), "row_no"),  # the index's name: set on the Index itself
        (lambda df: setattr(df.columns, "name", "fields"), "fields"),
    ],
    ids=["int", "float", "category", "str", "object", "index-name", "columns-name"],
)
def test_any_change_to_what_the_description_shows_is_seen(change, shows):
    df = frame()
    first = described(df)
    assert described(df) == first
    assert shows not in first
    change(df)
    assert shows in described(df)


@pytest.mark.parametrize(
    ("col", "row", "value"),
    [(0, 1, 99), (0, 2, pd.NA), (1, 0, pd.Timestamp("2030-01-02")), (2, 1, True),
     (3, 2, pd.Timestamp("2031-05-06", tz="UTC")), (4, 0, 2.5)],
    ids=["Int64", "Int64-missing", "datetime", "bool", "datetime-tz", "float-of-two"],
)
def test_a_cell_of_any_kind_of_block_written_in_place_reads_as_a_frame_described_anew(col, row, value):
    """Kept descriptions are read again by the shortest way each block allows (masked, dates, booleans, a time
    zone, a block of two columns): a written cell shows, as in a frame described for the first time."""
    df = pd.DataFrame({
        "n": pd.array([1, 2, 3, 4], dtype="Int64"), "t": pd.to_datetime(["2020-01-01"] * 4), "b": [False] * 4,
        "z": pd.to_datetime(["2021-01-01"] * 4).tz_localize("UTC"), "f": [0.5] * 4, "g": [1.5] * 4,
    })
    first = described(df)
    assert described(df) == first
    df.iat[row, col] = value
    now = described(df)
    assert now != first and now == described(df.copy(deep=True))


def test_a_mutable_object_changed_in_place_in_a_shown_cell_is_seen():
    df = pd.DataFrame({"tags": pd.Series([["a"], ["b"], ["c"], ["d"]], dtype=object), "n": [1, 2, 3, 4]})
    assert "0 ['a'] 1" in described(df)
    df.iat[0, 0].append("zz")  # the same list object, longer
    assert "0 ['a', 'zz'] 1" in described(df)


def test_a_frame_seen_only_through_a_copy_s_change_is_seen():
    df = frame()
    first = described(df)
    view = df.copy(deep=False)  # shares the data: writing a cell of df now copies its block (pandas' copy on write)
    df.iat[0, 1] = 0.5e-3
    assert described(df) != first and "0.0005" in described(df)
    assert described(view) == first


def test_the_head_keeps_what_pandas_shows():
    """The head is laid out from the blocks: the same values, dtypes and precision as ``to_string``."""
    df = pd.DataFrame({
        "when": pd.to_datetime(["2024-01-01", "2024-01-02", None, "2024-01-04"]),
        "amount": [0.5, 1.25, np.nan, 3.0],
        "big": [1e20, 2.0, 3.0, 4.0],
        "flag": [True, False, True, False],
        "n": pd.array([1, None, 3, 4], dtype="Int64"),
        "price": [decimal.Decimal("1.10"), decimal.Decimal("2"), None, decimal.Decimal("4")],
        "note": ["a" * 40, "line\nbreak", "", "x"],
        "day": [datetime.date(2024, 1, d) for d in (1, 2, 3, 4)],
    }, index=pd.Index([10, 20, 30, 40], name="row"))
    text = described(df)
    assert "pd.DataFrame, shape (4, 8); columns: when: datetime64[us], amount: float64, big: float64" in text
    head = text.split("first 3 rows:\n", 1)[1].splitlines()
    assert len(head) == 5
    assert head[1].split() == ["row"]
    assert head[2].split() == ["10", "2024-01-01", "0.50", "1.000000e+20", "True", "1", "1.10",
                               "aaaaaaaaaaaaaaaaaaaa...", "2024-01-01"]
    assert head[3].split()[:6] == ["20", "2024-01-02", "1.25", "2.000000e+00", "False", "<NA>"]
    assert "line\\nbreak" in head[3]  # a cell is one line
    assert head[4].split()[:3] == ["30", "NaT", "NaN"]


def test_strings_kept_in_pyarrow_show_as_pandas_shows_them():
    """pandas 3 keeps ``str`` columns, labels and categories in pyarrow: the head reads them from there."""
    df = pd.DataFrame({
        "name": pd.array(["ann", None, "cy", "dee"], dtype="str"),
        "kind": pd.Categorical(["a", None, "b", "a"]),
        "label": pd.array(["x", None, "z", "w"], dtype="string"),
        "tag": pd.Categorical(["p", None, "q", "p"], categories=pd.array(["p", "q"], dtype="string")),
        "many": pd.Categorical(["c7", None, "c99", "c0"], categories=[f"c{i}" for i in range(100)]),
    }, index=pd.Index(["r1", "r2", "r3", "r4"], dtype="str"))
    expected = df.iloc[:3].to_string(max_colwidth=24, show_dimensions=False).splitlines()
    head = described(df).split("first 3 rows:\n", 1)[1].splitlines()
    assert head == [" ".join(line.split()) for line in expected]
    assert head[2].split() == ["r2", "NaN", "NaN", "<NA>", "<NA>", "NaN"]


@pytest.mark.parametrize(
    "change",
    [lambda df: df.iat.__setitem__((1, 0), "zelda"), lambda df: df.iat.__setitem__((1, 0), None)],
    ids=["value", "missing"],
)
def test_a_string_kept_in_pyarrow_written_in_place_is_seen(change):
    df = pd.DataFrame({"name": pd.array(["ann", "bob", "cy", "dee"], dtype="str"), "n": [1, 2, 3, 4]})
    first = described(df)
    assert described(df) == first
    blocks = [id(b) for b in df._mgr.blocks]
    change(df)
    assert [id(b) for b in df._mgr.blocks] == blocks  # the same frame, the same blocks: only a value differs
    assert described(df) != first
    assert described(df).split("first 3 rows:\n", 1)[1] == "\n".join(
        " ".join(line.split()) for line in df.iloc[:3].to_string().splitlines()
    )


async def test_a_new_frame_bound_to_the_same_name_is_described_anew():
    n = np.arange(1000)
    ns = {"sales": pd.DataFrame({"id": n, "name": np.array(["ann", "bob", "cy"])[n % 3]})}
    before = await run_and_read(ns)
    assert "ann" in before
    ns["sales"] = pd.DataFrame({"id": n + 5, "name": np.array(["zed", "yan", "xi"])[n % 3]})
    after = await run_and_read(ns)
    assert "zed" in after and "ann" not in after and "5" in after


def pair(base, change):
    """A frame and another over the same data made to differ from it in one thing the description shows."""
    other = base.copy(deep=False)
    change(other)
    return base, other


@pytest.mark.parametrize(
    ("change", "shows"),
    [
        (lambda df: df.iat.__setitem__((1, 1), 0.00042), "0.00042"),  # a value
        (lambda df: setattr(df, "columns", [1.0, 2.0, 3.0]), "1.0"),  # labels equal to 1, 2, 3, shown otherwise
        (lambda df: setattr(df, "index", pd.RangeIndex(5, 9)), "5 7 0.500 a"),  # the rows' labels
        (lambda df: df.index.rename("row", inplace=True), "row"),  # a name
        (lambda df: df.__setitem__(3, pd.Categorical(["b", "b", "a", "a"], categories=["b", "a"])), "0 7 0.500 b"),
    ],
    ids=["value", "label-type", "range-start", "index-name", "categories"],
)
def test_a_new_frame_like_one_described_before_is_described_as_it_is(change, shows):
    base = pd.DataFrame({1: [7, 8, 9, 10], 2: [0.5, 0.25, 0.125, 1.0], 3: pd.Categorical(["a", "a", "b", "b"])})
    first, other = pair(base, change)
    before = described(first)
    assert shows not in before.split("first 3 rows:\n", 1)[1]
    after = described(other)
    assert shows in after
    assert after.split("first 3 rows:\n", 1)[1] == "\n".join(
        " ".join(line.split()) for line in other.iloc[:3].to_string().splitlines()
    )
    assert described(first) == before


def test_a_fingerprint_names_the_frame_as_it_was_when_taken():
    """A frame's fingerprint reads its labels and dtypes only when compared or described: what it names is
    still the frame as it was, whatever pandas changed in place since."""
    df = pd.DataFrame({"a": [1, 2], "b": [0.5, 1.5], "c": [3, 4]})
    first = u.actor.fingerprint(df)  # nothing read from it yet
    df.insert(0, "z", ["p", "q"])  # the blocks after it move one place up
    df["a"] = df["a"].astype(float)
    changed = u.actor.fingerprint(df)
    del df["z"]
    df["a"] = df["a"].astype("int64")
    back = u.actor.fingerprint(df)  # new blocks and labels, saying what the first said
    assert first != changed and changed != back
    assert first == back and hash(first) == hash(back)
    assert "a: int64, b: float64, c: int64" in described(df)


def test_a_wide_frame_names_each_column_s_dtype():
    df = pd.DataFrame({f"c{i}": (np.arange(3) if i % 2 else np.arange(3) / 2) for i in range(300)})
    expected = ", ".join(f"c{i}: {'int64' if i % 2 else 'float64'}" for i in range(12))
    assert f"columns: {expected}, ... (288 more columns)" in described(df)
    df.insert(0, "first", ["a", "b", "c"])
    assert "columns: first: str, c0: float64, c1: int64" in described(df)


def test_a_frame_whose_labels_are_lists_is_described():
    df = pd.DataFrame([[1, 2]], columns=pd.Index([[1], [2]], dtype=object, tupleize_cols=False))
    assert described(df).startswith("pd.DataFrame, shape (1, 2); columns: [1]: int64, [2]: int64\nfirst 1 rows:")


def test_a_large_category_list_is_not_kept_once_its_frame_is_gone():
    import gc
    import weakref

    df = pd.DataFrame({"c": pd.Categorical(["v1", "v2"], categories=[f"v{i}" for i in range(5000)])})
    assert "v1" in described(df)
    categories = weakref.ref(df["c"].dtype.categories)
    del df
    gc.collect()
    assert categories() is None


def pandas_head(df):
    """pandas' own first rows, each line's runs of spaces made one."""
    return "\n".join(" ".join(line.split()) for line in df.iloc[:3, :12].to_string(max_colwidth=24).splitlines())


def head_of(df):
    return described(df).split("first 3 rows:\n", 1)[1]


def test_columns_another_frame_showed_are_shown_under_this_frame_s_labels_dtypes_and_values():
    """Columns laid out before are kept by what their block's first rows read: a frame over the same rows shows
    its own labels, its own dtype's reading of the same bytes, its own categories and its own written cells."""
    n = np.arange(6)
    base = pd.DataFrame({"a": n * 86_400_000_000, "b": n / 4, "k": pd.Categorical(np.array(["x", "y"])[n % 2])})
    described(base)
    renamed = base.copy(deep=False)
    renamed.columns = ["when", "ratio", "kind"]
    as_dates = pd.DataFrame({"a": base["a"].to_numpy().view("datetime64[us]"), "b": base["b"], "k": base["k"]})
    as_floats = pd.DataFrame({"a": base["a"].to_numpy().view("float64"), "b": base["b"], "k": base["k"]})
    recoded = base.copy(deep=False)
    recoded["k"] = pd.Categorical.from_codes(base["k"].cat.codes, categories=["p", "q"])
    written = base.copy(deep=False)
    written.iat[1, 1] = 99.5
    for other in (renamed, as_dates, as_floats, recoded, written):
        assert head_of(other) == pandas_head(other)
    assert "99.5" in head_of(written) and "99.5" not in head_of(base)
    assert head_of(base) == pandas_head(base)


def test_the_first_columns_of_a_frame_of_interleaved_dtypes_are_shown_in_order():
    """Which block holds each shown column, and where in it, is read from the fingerprint's parts: blocks whose
    columns are scattered (placements kept as arrays, long ones too) and moved by an insert."""
    kinds = [(i * i) % 7 for i in range(240)]  # 0 or 1: int, 2: float, 4: str, in no regular pattern
    df = pd.DataFrame({
        f"c{i}": np.arange(5) * i if k < 2 else np.arange(5) / (i + 1) if k == 2 else [f"s{i}"] * 5
        for i, k in enumerate(kinds)
    })
    assert sum(len(b.mgr_locs) > 64 and type(b.mgr_locs.indexer) is not slice for b in df._mgr.blocks) == 2
    assert head_of(df) == pandas_head(df)
    df.insert(0, "first", ["a", "b", "c", "d", "e"])
    df.insert(5, "middle", np.arange(5) * 1.5)
    assert head_of(df) == pandas_head(df)
    assert "columns: first: str, c0: int64, c1: int64, c2: str, c3: float64, middle: float64" in described(df)


def test_a_copy_whose_labels_or_dtypes_change_in_place_is_read_anew():
    """A copy shares its frame's data, placements and dtypes: changed in place, the copy's description says what
    it has now, and the frame's what it had."""
    base = pd.DataFrame({"a": [1, 2, 3], "b": [0.5, 1.5, 2.5], "c": ["x", "y", "z"]})
    first = described(base)
    copy = base.copy(deep=False)
    assert described(copy) == first
    copy["a"] = copy["a"].astype("float64")
    assert "columns: a: float64, b: float64, c: str" in described(copy)
    copy.columns = ["p", "q", "r"]
    assert "columns: p: float64, q: float64, r: str" in described(copy)
    assert head_of(copy) == pandas_head(copy)
    assert described(base) == first


@pytest.mark.parametrize(
    ("change", "shows"),
    [
        (lambda df: df.replace({"a": {2: "two"}}, inplace=True), "a: object"),  # a new manager: a's dtype changes
        (lambda df: df.fillna({"b": 0.25}, inplace=True), "b: float64"),
        (lambda df: df.update(pd.DataFrame({"b": [9.5, 8.5, 7.5, 6.5]})), "9.5"),
        (lambda df: df.__delitem__("c"), "a: int64, b: float64\n"),
    ],
    ids=["replace", "fillna", "update", "del"],
)
def test_a_frame_whose_manager_is_replaced_in_place_is_described_as_it_is(change, shows):
    """pandas' in-place methods give the frame a new block manager or new blocks under the same axes: the
    description says what the frame is now."""
    df = pd.DataFrame({"a": [1, 2, 3, 4], "b": [0.5, np.nan, 2.5, 3.5], "c": ["x", "y", "z", "w"]})
    first = described(df)
    change(df)
    after = described(df)
    assert after != first and shows in after
    assert head_of(df) == pandas_head(df)


def rows_and_rest(df):
    """The description's first rows split into the row labels' column (as pandas lays it out: left-justified to
    the widest label, two spaces before the rest) and the rest of each line."""
    lines = u.actor.describe_value(df).split("first 3 rows:\n", 1)[1].splitlines()
    if df.index.name is not None:
        del lines[1]  # the index's name, on a line of its own
    shown = [str(label) for label in df.index[:3]]
    width = max(map(len, [*shown, str(df.index.name) if df.index.name is not None else ""]))
    assert [line[:width + 2] for line in lines] == [" " * (width + 2)] + [label.ljust(width + 2) for label in shown]
    return [line[width + 2:] for line in lines]


def test_a_frame_showing_another_s_rows_under_other_labels_shows_its_own_labels():
    """A frame over rows described before, labelled anew (a copy indexed again), is laid out with its own row
    labels, aligned as pandas aligns them; the frame described first still shows its own."""
    n = np.arange(5)
    base = pd.DataFrame({  # one block holds value and ratio: the columns are not in their blocks' order
        "value": n / 4, "id": n, "ratio": n / 8, "kind": pd.Categorical(np.array(["a", "b"])[n % 2]),
    })
    first = described(base)
    rest = rows_and_rest(base)
    others = []
    for index in (
        pd.RangeIndex(7, 12), pd.RangeIndex(99_998, 100_003), pd.RangeIndex(0, 10, 2), pd.RangeIndex(3, 8, name="row"),
        pd.RangeIndex(13, 18, name="row"), pd.Index([5, 6, 7, 8, 9]), pd.Index(["p", "qq", "rrr", "s", "t"]),
        pd.RangeIndex(1_000_000, 1_000_005), pd.RangeIndex(8, 3, -1),
    ):
        other = base.copy(deep=False)
        other.index = index
        others.append(other)
        assert head_of(other) == pandas_head(other) and rows_and_rest(other) == rest
    for other in others:  # described again (kept)
        assert head_of(other) == pandas_head(other) and rows_and_rest(other) == rest
    assert described(base) == first and rows_and_rest(base) == rest
    last = others[-1]
    last.iat[1, 0] = 42.5  # written in place after it was described
    assert head_of(last) == pandas_head(last) and "42.5" in head_of(last)


def test_a_frame_sharing_another_s_labels_or_blocks_layout_names_its_own_labels_and_dtypes():
    """Frames whose columns Index, blocks' placements or dtypes are the very objects of a frame described before
    (a copy, ``astype``, frames made over the same labels) name their own labels and dtypes."""
    base = pd.DataFrame({"a": [1, 2, 3], "b": [4, 5, 6], "c": [0.5, 1.5, 2.5]})  # blocks: int64 (a, b), float64 (c)
    assert "columns: a: int64, b: int64, c: float64\n" in described(base)
    cases = [
        (base.copy(deep=False), "a: int64, b: int64, c: float64"),
        # the same labels and dtypes, in blocks placed otherwise: int64 (a, c), float64 (b)
        (pd.DataFrame({"a": [1, 2, 3], "b": [0.5, 1.5, 2.5], "c": [4, 5, 6]}, columns=base.columns),
         "a: int64, b: float64, c: int64"),
        (base.astype("float64"), "a: float64, b: float64, c: float64"),  # the same labels and placements
        (base.set_axis(["p", "q", "r"], axis=1), "p: int64, q: int64, r: float64"),  # the same blocks' layout
    ]
    for other, says in cases:
        assert f"columns: {says}\n" in described(other)
        assert head_of(other) == pandas_head(other)
    assert "columns: a: int64, b: int64, c: float64\n" in described(base)


def test_a_copy_relabelled_twice_is_described_with_its_labels_now():
    """A copy's fingerprint may hold another frame's parts (the same labels and blocks' layout): the copy's own
    columns Index is still kept while its fingerprint is cached, so a columns Index made later never takes its
    identity (relabelled twice, the first Index let go: an allocator reuses its place at once)."""
    for _ in range(50):
        base = pd.DataFrame({"a": [1, 2, 3], "b": [4, 5, 6], "c": [0.5, 1.5, 2.5]})
        described(base)
        df = base.copy(deep=False)
        u.actor.fingerprint(df)
        df.columns = ["x", "y", "z"]
        df.columns = ["p", "q", "r"]
        assert "columns: p: int64, q: int64, r: float64\n" in described(df)


def test_cells_written_one_column_at_a_time_in_a_block_of_numbers_show_each_time():
    """A block holding several columns, a cell of one of them written in place at a time (the others' laid out
    columns kept): each description shows every column as it is."""
    df = pd.DataFrame({"a": [0.5, 1.5, 2.5, 3.5], "b": [10.0, 20.0, 30.0, 40.0], "c": [7.25, 8.25, 9.25, 1.0]})
    assert len(df._mgr.blocks) == 1
    described(df)
    for row, col, value in [(1, 1, 99.125), (0, 2, -4.5), (2, 0, 1234.5), (3, 1, 5.0), (1, 1, 20.0)]:
        df.iat[row, col] = value
        assert head_of(df) == pandas_head(df)


def _named_rows(df):
    df.index = pd.Index([f"r{i}" for i in range(len(df))], name="row")
    return df


def _labelled_rows(df):
    df.index = pd.Index([f"r{i}" for i in range(len(df))])
    return df


def _relabelled(df):
    """A frame that shows all another showed under other row labels: its head is the other's, relabelled."""
    described(df)
    again = df.copy(deep=True)  # its own blocks: a cell written in it stays in place
    again.index = pd.RangeIndex(1000, 1000 + len(df))
    return again


@pytest.mark.parametrize(
    "make", [lambda df: df, _named_rows, _labelled_rows, _relabelled], ids=["range", "named", "labels", "relabelled"]
)
def test_a_frame_whose_cells_are_written_one_after_another_reads_as_a_frame_described_anew(make):
    """A frame described before, cells of each kind of block written in place one after another (widths growing
    and shrinking): each description is the one a new frame over the same values gets."""
    df = make(frame())
    for col, row, value in [(1, 1, 7777.5), (0, 0, 42), (1, 2, -0.25), (2, 1, "c"), (3, 0, "zelda"), (4, 2, "w"),
                            (1, 1, 0.5), (0, 0, 123456789), (5, 1, 99.125), (1, 0, 1.0)]:
        if col < df.shape[1]:
            df.iat[row, col] = value
        now = described(df)  # kept: the next write finds this one
        assert now == described(df.copy(deep=True)), (col, row, value)


def test_strings_in_pyarrow_a_description_read_are_not_kept_once_a_cell_is_written():
    """A kept description knows the pyarrow array of strings it read by a weak reference only (while that very
    array is the block's, it reads the same): a cell written (pandas makes a new array), the old one goes, and
    the next description shows the new cell."""
    import gc
    import weakref

    df = pd.DataFrame({"s": [f"w{i}" for i in range(1000)], "n": np.arange(1000)})
    assert "w1" in described(df) and "w1" in described(df)
    old = weakref.ref(df._mgr.blocks[0].values._pa_array)
    df.iat[1, 0] = "zelda"
    gc.collect()
    assert old() is None
    assert "zelda" in described(df) and "w1" not in described(df)
    df.iat[2, 0] = "w2"  # a new array that reads the same: known from then on
    assert "zelda" in described(df) and "w2" in described(df)


def test_a_frame_over_a_stepped_range_of_row_labels_has_as_many_rows_as_the_range():
    df = pd.DataFrame({"a": np.arange(9), "b": np.arange(9) / 2}, index=pd.RangeIndex(50, 5, -5))
    assert described(df).startswith("pd.DataFrame, shape (9, 2)")
    twin = df.copy(deep=False)  # the same labels and blocks' layout: the same parts
    twin.index = pd.RangeIndex(0, 27, 3)
    assert described(twin).startswith("pd.DataFrame, shape (9, 2)") and "\n3 " in described(twin)


def test_row_labels_set_anew_are_shown_whatever_address_their_index_has():
    """A frame's RangeIndex is read by its range, never known by its identity: row labels set twice (the first
    index let go, its place given by the allocator to the next) show as they are."""
    reused = 0
    for i in range(50):
        df = pd.DataFrame({"a": [1.5, 2.5, 3.5], "b": ["x", "y", "z"]})
        first = id(df._mgr.axes[1])
        assert head_of(df).splitlines()[1].startswith("0 ")
        for k in range(1, 10):  # until an index takes the place of the one described (most often it soon does)
            df.index = pd.RangeIndex(10 * k + i, 10 * k + i + 3)
            if id(df._mgr.axes[1]) == first:
                reused += 1
                break
        assert head_of(df).splitlines()[1].startswith(f"{10 * k + i} "), (i, k)
    assert reused  # the case this test is for did happen


@pytest.mark.parametrize("per_value", [600, 30, 20])
def test_a_listing_describes_in_order_what_fits_its_budget_and_names_the_rest(per_value):
    """Whatever the budget, the listing is every variable's line while they fit, then the rest by name (a frame
    that cannot fit is not described, and one that fits is)."""
    variables = {f"f{i}": pd.DataFrame({"a": [i, i + 1], "b": ["x", "y"]}) for i in range(3)}
    variables |= {"empty": pd.DataFrame(), "n": 1, "w": "word"}
    names = sorted(variables)
    lines = [f"- {n}: {u.actor.describe_value(variables[n], per_value)}" for n in names]
    for budget in range(sum(map(len, lines)) + len(lines) + 2):
        expected, used = [], 0
        for i, line in enumerate(lines):
            if used + len(line) > budget:
                expected.append(f"- ({len(names) - i} more, not described for space: {', '.join(names[i:])})")
                break
            expected.append(line)
            used += len(line) + 1
        listing = u.actor.describe_namespace(variables, budget=budget, per_value=per_value)
        assert listing == "\n".join(expected), budget


def test_frames_over_the_same_columns_with_other_row_counts_each_have_their_shape():
    df = pd.DataFrame({"a": np.arange(100), "b": np.arange(100) / 2, "c": ["x"] * 100})
    parts = [df, df.iloc[:5], df.copy(deep=False), df.iloc[10:13], df]
    for frame, rows in zip(parts, [100, 5, 100, 3, 100]):
        assert u.actor.fingerprint(frame)[2] == (rows, 3)
        assert described(frame).startswith(f"pd.DataFrame, shape ({rows:,}, 3)")

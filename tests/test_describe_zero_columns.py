"""A frame with no columns is described as pandas shows it (``Empty DataFrame``, with its row labels), whatever was
described before: a frame with no columns and other labels, described earlier, left every later one with a
RangeIndex described without its rows (a head made anew from no columns), so a description depended on what the
kernel had described before and a prompt recorded in one kernel read otherwise in another."""

import pandas as pd

from unity_nb.actor._describe import describe_value

WANT = "pd.DataFrame, shape (3, 0); columns: \nfirst 3 rows:\nEmpty DataFrame\nColumns: []\nIndex: [0, 1, 2]"


def test_a_frame_with_no_columns_reads_the_same_after_another_with_other_labels():
    other = pd.DataFrame({"v": [1, 2, 3]}, index=list("abc")).drop(columns=["v"])
    assert "Index: [a, b, c]" in describe_value(other)
    assert describe_value(pd.DataFrame(index=range(3))) == WANT
    df = pd.DataFrame({"v": [1, 2, 3]}, index=list("abc"))
    df = df.drop(columns=["v"]).reset_index(drop=True)
    assert describe_value(df) == WANT

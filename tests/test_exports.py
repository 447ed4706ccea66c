import types

import unity_nb


def test_all_is_a_curated_tuple_matching_the_public_names():
    assert isinstance(unity_nb.__all__, tuple)
    assert len(set(unity_nb.__all__)) == len(unity_nb.__all__)
    public = {
        name
        for name, value in vars(unity_nb).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert public == set(unity_nb.__all__)


def test_every_exported_name_is_documented():
    for name in unity_nb.__all__:
        obj = getattr(unity_nb, name)
        if callable(obj):
            assert obj.__doc__, name

"""Measures against qrels (``judged``) and against the reference run (``reference``)."""

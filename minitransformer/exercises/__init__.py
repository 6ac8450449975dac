"""Checking functions for the exercises at the end of each lesson notebook.

``lessons_0_3`` checks the exercises of lessons 0-3 and ``lessons_4_7`` those of
lessons 4-7. Every checker takes the learner's function and runs it on fixed
random inputs. It returns False (and says so) when the function still returns
None, raises AssertionError naming what is wrong when the answer is wrong, and
prints "correct" with the measured errors and returns True when it is right.
"""

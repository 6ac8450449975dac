"""Checking functions for the exercises at the end of each lesson notebook.

``lessons_0_3`` checks the exercises of lessons 0-3, ``lessons_4_7`` those of
lessons 4-7, and ``lesson_NN`` those of lesson NN from lesson 8 on; ``_common``
holds what they share (one contract, one tolerance). Every checker takes the
learner's function and runs it on fixed random inputs. It returns False (and
says so) when the function still returns None, raises AssertionError naming
what is wrong, with a hint at the likely mistake, when the answer is wrong,
and prints "correct" with the measured errors and returns True when it is right.
"""

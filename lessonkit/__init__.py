"""The teaching harness of minitransformer's lessons, beside the library rather than inside it.

``minitransformer`` is what a learner reads: the layers, the model, training and decoding. This
package is what the lesson notebooks and a teacher use around it, and nothing in the library
imports it (``python -m minitransformer grade`` reaches it from the command line alone):

* ``lessonkit.exercises``: the checking cells of the lessons' exercises, one module per lesson or
  group of lessons, and ``catalogue``, the table of every exercise with its points and minutes;
* ``lessonkit.grade``: the grader behind ``python -m minitransformer grade`` (docs/teachers.md);
* ``lessonkit.prose``: ``claim`` and ``show_markdown``, the two ways a lesson states a number it measures;
* ``lessonkit.runtimes``: ``show_cost`` and ``show_slow_cell``, what each lesson costs to run, from
  ``lessons/runtimes.json``.

It ships in the same distribution as the library: ``pip install -e .`` installs both.
"""

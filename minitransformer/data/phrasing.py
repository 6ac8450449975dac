"""What a task's model was trained to read, and a check of a typed sentence against it.

A model of a generated task has only ever seen its generator's sentences. Given
"the 25th of December, 2037" a dates model still writes *a* date, an invented one:
it cannot say "I don't know this form". So ``translate`` asks the task first. Each
check takes a sentence as the model will read it (tokenized by the task's rule and
joined back, ``vocab.join_words``) and returns None when the sentence is one the
generator could have written, or else the reason, one line, naming the forms the
model knows and, when it can tell, the sentence in a form it does know:

    >>> check_number_name("one thousand two hundred and thirty-four", number_name, 10_000)  # doctest: +SKIP
    "this model was trained on ... ; did you mean 'one thousand, two hundred and thirty-four'?"

The checks are given the generators' own functions (``translation.number_name``,
``translation.format_day``), so a sentence passes exactly when the generator
writes it that way.
"""

from __future__ import annotations

import datetime
import re

from .vocab import split_words

__all__ = ["NUMBER_PHRASING", "DATE_PHRASING", "number_value", "check_number_name", "parse_date", "date_check"]

NUMBER_PHRASING = ("English number names from zero to nine thousand, nine hundred and ninety-nine, written as "
                   "num2words writes them: 'one thousand, two hundred and thirty-four' (no digits)")
DATE_PHRASING = ("English dates of 1950-2049 in four forms: 'Tuesday, March 5, 2024', 'March 5, 2024', "
                 "'Tuesday, 5 March 2024', '5 March 2024' (no digits-only forms like 2024-03-05)")

_UNITS = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
          "sixteen seventeen eighteen nineteen").split()
_TENS = {name: 10 * i for i, name in enumerate("_ _ twenty thirty forty fifty sixty seventy eighty ninety".split())
         if name != "_"}


def number_value(text: str) -> int | None:
    """The number an English number name (or digits: "1234", "1,234") stands for, read loosely:
    commas and "and" are skipped, so "one thousand two hundred thirty-four" is 1234 too. None
    when ``text`` is not a number name."""
    digits = text.replace(",", "").strip()
    if digits.isdigit() and digits.isascii():
        return int(digits)
    total = current = 0
    seen = False
    for word in split_words(text.lower()):
        if word in (",", "and"):
            continue
        parts = word.split("-")
        if len(parts) == 2 and parts[0] in _TENS and parts[1] in _UNITS[1:10]:
            current += _TENS[parts[0]] + _UNITS.index(parts[1])
        elif word in _UNITS:
            current += _UNITS.index(word)
        elif word in _TENS:
            current += _TENS[word]
        elif word == "hundred" and seen:
            current *= 100
        elif word == "thousand" and seen:
            total, current = total + current * 1000, 0
        else:
            return None
        seen = True
    return total + current if seen else None


def check_number_name(text: str, number_name, n_numbers: int) -> str | None:
    """None when ``text`` is the English name the numbers tasks write for a number below ``n_numbers``
    (``number_name(n, "en")``, the generator's own spelling); else why not."""
    value = number_value(text)
    if value is not None and value < n_numbers and number_name(value, "en") == text:
        return None
    why = f"this model was trained on {NUMBER_PHRASING}; {text!r} is not one"
    if value is not None and value >= n_numbers:
        return f"{why} ({value:,} is more than {n_numbers - 1:,})"
    if value is not None:
        return f"{why}; did you mean {number_name(value, 'en')!r}?"
    return why


_MONTHS = ("January February March April May June July August September October November December").split()
_WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")   # date.weekday() order
_ISO = re.compile(r"(\d{4})-(\d{1,2})-(\d{1,2})")
_DAY = re.compile(r"(\d{1,2})(?:st|nd|rd|th)?")


def parse_date(text: str) -> tuple[datetime.date | None, str | None]:
    """(the date ``text`` names, the weekday it gives or None), read loosely: a month name, a day
    (1-31, "25th" too) and a four-digit year in any order, or 2037-12-25. (None, None) when the
    text names no single day of the calendar."""
    iso = _ISO.fullmatch(text.strip())
    if iso:
        year, month, day = (int(g) for g in iso.groups())
        weekday = None
    else:
        words = [w for w in split_words(text) if w not in (",", ".")]
        months = [w for w in words if w.capitalize() in _MONTHS]
        days = [int(m.group(1)) for w in words if (m := _DAY.fullmatch(w.lower())) and len(w) <= 4]
        years = [int(w) for w in words if len(w) == 4 and w.isdigit()]
        weekdays = [w.capitalize() for w in words if w.capitalize() in _WEEKDAYS]
        if len(months) != 1 or len(days) != 1 or len(years) != 1 or len(weekdays) > 1:
            return None, None
        year, month, day = years[0], _MONTHS.index(months[0].capitalize()) + 1, days[0]
        weekday = weekdays[0] if weekdays else None
    try:
        return datetime.date(year, month, day), weekday
    except ValueError:
        return None, None


def date_check(text: str, format_day, forms, date_range) -> str | None:
    """None when ``text`` is a date of ``date_range`` (first, last) written in one of the ``forms``
    ((locale, format) pairs) exactly as ``format_day(day, locale, format)`` writes it, the dates
    generator's own function (``translation.format_day``); else why not."""
    day, weekday = parse_date(text)
    first, last = date_range
    if day is not None and first <= day <= last and text in {format_day(day, *form) for form in forms}:
        return None
    why = f"this model was trained on {DATE_PHRASING}; {text!r} is not a form it knows"
    if day is None:
        return why
    if not first <= day <= last:
        return f"{why} ({day.year} is outside {first.year}-{last.year})"
    actual = _WEEKDAYS[day.weekday()]
    if weekday is not None and weekday != actual:
        return f"{why} ({format_day(day, 'en_US', 'long')} is a {actual}, not a {weekday})"
    return f"{why}; did you mean {format_day(day, 'en_US', 'full')!r}?"

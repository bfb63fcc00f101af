"""Flag value parsers (distributetrain/core/validation.py): what each accepts, and the
text of its refusal, which must show the valid form."""

import pytest

from distributetrain.core import validation

LABEL_FORM = ("must be a DNS-1123 label (lowercase letters, digits and '-', starting and ending with a letter "
              "or digit, at most {} characters), got {!r}")
SUBDOMAIN_FORM = ("must be a DNS-1123 subdomain (lowercase letters, digits, '-' and '.', starting and ending "
                  "with a letter or digit, at most 253 characters), got {!r}")


@pytest.mark.parametrize("text", ["a", "team-a", "0a9", "a" * 63])
def test_a_dns_label_is_returned_as_given(text):
    assert validation.dns_label(text) == text


@pytest.mark.parametrize("text,max_length", [
    ("Team-a", 63), ("-a", 63), ("a-", 63), ("a.b", 63), ("", 63), ("a" * 64, 63), ("abcdef", 5),
])
def test_a_bad_dns_label_is_refused_with_its_form_and_length(text, max_length):
    with pytest.raises(ValueError) as refused:
        validation.dns_label(text, max_length)
    assert str(refused.value) == LABEL_FORM.format(max_length, text)


@pytest.mark.parametrize("text", ["a", "s3-creds", "a.b-c.d", "a" * 253])
def test_a_dns_subdomain_is_returned_as_given(text):
    assert validation.dns_subdomain(text) == text


@pytest.mark.parametrize("text", ["S3", "a..b", ".a", "a.", "a_b", "", "a" * 254])
def test_a_bad_dns_subdomain_is_refused_with_its_form(text):
    with pytest.raises(ValueError) as refused:
        validation.dns_subdomain(text)
    assert str(refused.value) == SUBDOMAIN_FORM.format(text)

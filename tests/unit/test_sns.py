"""The SNS message shape, the string SNS signs (as AWS documents it), the URLs allowed."""

from __future__ import annotations

import pytest

from tepat.domain.sns import (
    SnsRefused,
    check_cert_url,
    check_sns_url,
    check_topic_arn,
    parse_message,
    string_to_sign,
)

BASE = {
    "MessageId": "22b80b92-fdea-4c2c-8f9d-bdfb0c7bf324",
    "TopicArn": "arn:aws:sns:us-west-2:123456789012:MyTopic",
    "Message": 'line one\nline "two"',
    "Timestamp": "2012-05-02T00:54:06.655Z",
    "SignatureVersion": "1",
    "Signature": "EXAMPLE==",
    "SigningCertURL": "https://sns.us-west-2.amazonaws.com/SimpleNotificationService-f3ecfb7224c7233fe7bb5f59f96de52f.pem",
}


def test_notification_with_subject() -> None:
    m = parse_message({**BASE, "Type": "Notification", "Subject": "My First Message"})
    assert string_to_sign(m) == (
        b'Message\nline one\nline "two"\n'
        b"MessageId\n22b80b92-fdea-4c2c-8f9d-bdfb0c7bf324\n"
        b"Subject\nMy First Message\n"
        b"Timestamp\n2012-05-02T00:54:06.655Z\n"
        b"TopicArn\narn:aws:sns:us-west-2:123456789012:MyTopic\n"
        b"Type\nNotification\n"
    )


def test_notification_without_subject_and_with_unsigned_extras() -> None:
    m = parse_message(
        {**BASE, "Type": "Notification", "UnsubscribeURL": "https://x", "MessageAttributes": {}}
    )
    assert b"Subject" not in string_to_sign(m)
    assert b"UnsubscribeURL" not in string_to_sign(m)


def test_subscription_confirmation() -> None:
    m = parse_message(
        {
            **BASE,
            "Type": "SubscriptionConfirmation",
            "Token": "2336412f37",
            "SubscribeURL": "https://sns.us-west-2.amazonaws.com/?Action=ConfirmSubscription",
        }
    )
    assert string_to_sign(m) == (
        b'Message\nline one\nline "two"\n'
        b"MessageId\n22b80b92-fdea-4c2c-8f9d-bdfb0c7bf324\n"
        b"SubscribeURL\nhttps://sns.us-west-2.amazonaws.com/?Action=ConfirmSubscription\n"
        b"Timestamp\n2012-05-02T00:54:06.655Z\n"
        b"Token\n2336412f37\n"
        b"TopicArn\narn:aws:sns:us-west-2:123456789012:MyTopic\n"
        b"Type\nSubscriptionConfirmation\n"
    )


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"Type": "Other"}, "Type"),
        ({"Type": "Notification", "MessageId": None}, "MessageId"),
        ({"Type": "Notification", "Message": 42}, "Message"),
        ({"Type": "Notification", "SignatureVersion": "3"}, "SignatureVersion"),
        ({"Type": "SubscriptionConfirmation"}, "SubscribeURL"),
    ],
)
def test_malformed_names_the_field(change: dict[str, object], field: str) -> None:
    with pytest.raises(SnsRefused) as e:
        parse_message({**BASE, **change})
    assert e.value.field == field


@pytest.mark.parametrize(
    "url",
    [
        "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-x.pem",
        "https://sns.ap-southeast-2.amazonaws.com/x.pem",
        "https://sns.us-gov-west-1.amazonaws.com/x.pem",
    ],
)
def test_sns_certificate_urls(url: str) -> None:
    assert check_cert_url(url) == url


@pytest.mark.parametrize(
    "url",
    [
        "http://sns.us-east-1.amazonaws.com/x.pem",
        "https://sns.us-east-1.amazonaws.com.evil.example/x.pem",
        "https://evil.example/sns.us-east-1.amazonaws.com/x.pem",
        "https://sqs.us-east-1.amazonaws.com/x.pem",
        "https://sns.us-east-1.amazonaws.com:8443/x.pem",
        "https://user@sns.us-east-1.amazonaws.com/x.pem",
        "https://sns.us-east-1.amazonaws.com/x.txt",
        "https://sns..amazonaws.com/x.pem",
        "",
    ],
)
def test_other_certificate_urls_are_refused(url: str) -> None:
    with pytest.raises(SnsRefused):
        check_cert_url(url)


def test_subscribe_url_must_be_sns() -> None:
    with pytest.raises(SnsRefused):
        check_sns_url("https://169.254.169.254/latest", "SubscribeURL")


def test_topic_arns() -> None:
    assert check_topic_arn("arn:aws:sns:eu-west-1:123456789012:ses-events")
    for bad in ("", "ses-events", "arn:aws:sqs:eu-west-1:123456789012:q", "arn:aws:sns:x:1:t"):
        with pytest.raises(ValueError):
            check_topic_arn(bad)

"""ActiveMQ Classic over STOMP 1.2 (stomp.py): the production :class:`~tepat.ports.broker.Broker`.

The broker instance this expects is ``deploy/activemq/conf/activemq.xml``
(started by ``scripts/activemq.sh``): ``schedulerSupport="true"`` (otherwise
``AMQ_SCHEDULED_DELAY`` is silently ignored), the redelivery plugin with an
individual dead-letter queue ``DLQ.<queue>``, and the statistics plugin. One module per
part, each documenting how its part maps onto ActiveMQ; :mod:`.broker` composes them.
"""

from tepat.adapters.stomp.broker import StompBroker
from tepat.adapters.stomp.link import BrokerRefused
from tepat.adapters.stomp.url import TlsFiles, parse_stomp_url

# What callers outside the package use; the rest is imported from its module.
__all__ = ["BrokerRefused", "StompBroker", "TlsFiles", "parse_stomp_url"]

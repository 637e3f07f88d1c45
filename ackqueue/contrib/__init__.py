"""Integrations with other frameworks, each an optional front end on the public API.

:mod:`.scrapy` is a Scrapy scheduler whose crawl survives ``kill -9`` (the ``[scrapy]`` extra;
``ADDONS = {"ackqueue.contrib.scrapy.Addon": 0}``).

May import the public ``ackqueue`` package only, never a layer below it; nothing in ``ackqueue``
imports this folder, so that the frameworks it serves stay optional.
"""

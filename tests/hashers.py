"""A cheap password hash for the test suite.

Django's PBKDF2 runs 1,000,000 rounds: about 0.5 s per hash on a 2-core
machine, paid by every operator the UI tests create and by every sign-in, right
or wrong (a wrong username is hashed too, against timing attacks). The login
throttle's tests alone spent a hundred seconds in it. This hasher is the same
algorithm at 1,000 rounds; its hashes read ``pbkdf2_sha256$1000$…``, so the
servers tests start (the service's own settings, the stock hasher, which takes
the rounds from the hash) verify them too.
"""

from __future__ import annotations

from django.contrib.auth.hashers import PBKDF2PasswordHasher


class FastPBKDF2PasswordHasher(PBKDF2PasswordHasher):
    iterations = 1_000

"""asyncssh, imported once without cryptography's DSA deprecation warning.

asyncssh names cryptography's DSA key types at import (``asyncssh/crypto/dsa.py``, ``crypto/misc.py``:
``dsa.DSAPrivateKey`` in type aliases and signatures), and cryptography >= 47 warns on each name
(``CryptographyDeprecationWarning: DSA is deprecated ...``): ten lines on stderr at every CLI call. That import
warning is about asyncssh's own code, not about anything this package does (it never offers or accepts DSA keys
on purpose), so exactly it is ignored while asyncssh loads; any other warning, and that one from later code,
shows as usual.

Every module of agent_tools that uses asyncssh imports it (and the names of its submodules it needs) from here,
so whichever of them loads first, asyncssh loads silently.
"""

from __future__ import annotations

import warnings

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message=r"DSA is deprecated", category=Warning,
                            module=r"asyncssh(\..*)?$")
    import asyncssh
    from asyncssh.channel import SSHChannel
    from asyncssh.config import SSHClientConfig, SSHConfig
    from asyncssh.pattern import WildcardPatternList

__all__ = ["SSHChannel", "SSHClientConfig", "SSHConfig", "WildcardPatternList", "asyncssh"]

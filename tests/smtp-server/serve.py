"""A real SMTP server for the tests (tests/integration/smtp_server.rs starts it): aiosmtpd
(Debian's python3-aiosmtpd, installed by `cargo xtask setup`) on 127.0.0.1, scripted by
flags.

Run it with /usr/bin/python3: a pyenv or other python3 first on PATH does not see
Debian's packages. It listens on a free port and prints that port as its first line of
standard output; it serves until it is killed.

  --spool DIR            every accepted message is written as DIR/NNNN.eml (the bytes the
                         client sent, dot-unstuffed) and then DIR/NNNN.json: the envelope
                         (mail_from, rcpt_tos), when it was accepted (received_at, seconds
                         since the Unix epoch), the headers as Python's email package
                         decodes them, and each leaf MIME part's type and decoded text (an
                         independent MIME reader for the Rust test to check against)
  --script 451,250       the reply to each DATA in turn, then 250
  --reply-rcpt 550       the reply to each RCPT TO in turn, then 250
  --hang greeting|data   greet, then never answer again; or answer everything but DATA
  --starttls CERT KEY    offer STARTTLS and require it before anything else
  --tls CERT KEY         implicit TLS from the first byte (SMTPS)
  --auth USER:PASSWORD   require AUTH (PLAIN or LOGIN) before MAIL; over STARTTLS it is
                         offered only after the upgrade, otherwise on the plain connection
                         too (loopback tests)
"""

import argparse
import asyncio
import email
import email.policy
import json
import os
import ssl
import sys
import time

from aiosmtpd.smtp import SMTP, AuthResult, LoginPassword


def codes(text):
    return [int(code) for code in text.split(",") if code.strip()]


def reply(code, what):
    """A reply with an enhanced status code and text the tests recognise."""
    if 200 <= code < 300:
        return f"{code} 2.0.0 {what} accepted"
    if 400 <= code < 500:
        return f"{code} 4.3.0 Scripted deferral of {what}, try again later"
    return f"{code} 5.7.1 Scripted rejection of {what}"


class Handler:
    def __init__(self, args):
        self.data_replies = codes(args.script)
        self.rcpt_replies = codes(args.reply_rcpt)
        self.hang = args.hang
        self.spool = args.spool
        self.spooled = 0

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        code = self.rcpt_replies.pop(0) if self.rcpt_replies else 250
        if 200 <= code < 300:
            envelope.rcpt_tos.append(address)
        return reply(code, "RCPT")

    async def handle_DATA(self, server, session, envelope):
        if self.hang == "data":
            await asyncio.Event().wait()
        code = self.data_replies.pop(0) if self.data_replies else 250
        if 200 <= code < 300:
            self.spooled += 1
            self.write(self.spooled, envelope)
            return f"{code} 2.0.0 Message {self.spooled} accepted for delivery"
        return reply(code, "DATA")

    def write(self, number, envelope):
        raw = envelope.original_content
        message = email.message_from_bytes(raw, policy=email.policy.default)
        parts = [
            {
                "content_type": part.get_content_type(),
                "charset": part.get_content_charset(),
                "transfer_encoding": part.get("Content-Transfer-Encoding"),
                "text": part.get_content(),
            }
            for part in message.walk()
            if not part.is_multipart()
        ]
        summary = {
            "mail_from": envelope.mail_from,
            "rcpt_tos": envelope.rcpt_tos,
            "received_at": time.time(),
            "headers": [[name, str(value)] for name, value in message.items()],
            "content_type": message.get_content_type(),
            "parts": parts,
        }
        base = os.path.join(self.spool, f"{number:04d}")
        with open(base + ".eml", "wb") as file:
            file.write(raw)
        # The summary last and renamed into place: a reader that sees it sees it whole.
        with open(base + ".json.partial", "w", encoding="utf-8") as file:
            json.dump(summary, file)
        os.rename(base + ".json.partial", base + ".json")


class ScriptedSMTP(SMTP):
    def __init__(self, *args, hang=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.hang = hang

    async def smtp_EHLO(self, hostname):
        if self.hang == "greeting":
            await asyncio.Event().wait()
        return await super().smtp_EHLO(hostname)

    async def smtp_HELO(self, hostname):
        if self.hang == "greeting":
            await asyncio.Event().wait()
        return await super().smtp_HELO(hostname)


def tls_context(cert, key):
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    return context


def authenticator(expected):
    user, _, password = expected.partition(":")

    def check(server, session, envelope, mechanism, auth_data):
        ok = isinstance(auth_data, LoginPassword) and (
            auth_data.login == user.encode() and auth_data.password == password.encode()
        )
        # handled=False: aiosmtpd answers 235, or 535 5.7.8 on a failure.
        return AuthResult(success=ok, handled=False)

    return check


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--spool", required=True)
    parser.add_argument("--script", default="")
    parser.add_argument("--reply-rcpt", default="")
    parser.add_argument("--hang", choices=["greeting", "data"])
    parser.add_argument("--starttls", nargs=2, metavar=("CERT", "KEY"))
    parser.add_argument("--tls", nargs=2, metavar=("CERT", "KEY"))
    parser.add_argument("--auth", metavar="USER:PASSWORD")
    args = parser.parse_args()

    handler = Handler(args)
    options = {"hostname": "smtp.test", "hang": args.hang}
    if args.starttls:
        options["tls_context"] = tls_context(*args.starttls)
        options["require_starttls"] = True
    if args.auth:
        options["authenticator"] = authenticator(args.auth)
        options["auth_required"] = True
        # aiosmtpd offers AUTH only after STARTTLS unless told otherwise; it does not see
        # implicit TLS as TLS, and plain loopback tests want it too.
        options["auth_require_tls"] = bool(args.starttls)

    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: ScriptedSMTP(handler, loop=loop, **options),
        host="127.0.0.1",
        port=0,
        ssl=tls_context(*args.tls) if args.tls else None,
    )
    print(server.sockets[0].getsockname()[1], flush=True)
    await server.serve_forever()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(0)

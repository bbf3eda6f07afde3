import RoundupTrello
import Testing

/// `Retry-After` from Trello (or a proxy in its place): honoured up to a minute, Trello's windows being 10 seconds, so
/// one absurd header cannot stop an account's Trello work for an hour; never an overflow.
@Suite struct TrelloRetryAfterTests {
    @Test func retryAfterIsHonouredUpToAMinuteAndSaysWhenItWasCapped() {
        #expect(TrelloClient.maxRetryAfterSeconds == 60)
        let cases: [(String?, Int?, Bool)] = [
            ("10", 10, false), (" 7 ", 7, false), ("0", 0, false), ("60", 60, false), ("61", 60, true), ("3600", 60, true),
            ("100000000000000000000", 60, true), ("-5", 0, false), ("+12", 12, false), (nil, nil, false), ("", nil, false),
            ("soon", nil, false), ("Wed, 21 Oct 2015 07:28:00 GMT", nil, false), ("1.5", nil, false),
        ]
        for (header, seconds, capped) in cases {
            let parsed = TrelloClient.retryAfter(header)
            #expect(parsed?.seconds == seconds, "\(String(describing: header))")
            #expect((parsed?.capped ?? false) == capped, "\(String(describing: header))")
            #expect(TrelloClient.retryAfterSeconds(header) == seconds)
        }
    }
}

/// Trello's failures are classified once, where the answer arrives, by status and what the answer says; the callers
/// (a revoked token flagging the account, a pairing answered 422 or 502, webhooks left behind) switch over the kind.
@Suite struct TrelloFailureKindTests {
    @Test func answersAreClassifiedByStatusAndBody() {
        typealias Kind = TrelloError.Kind
        #expect(Kind.answer(status: 401, body: "invalid token") == .tokenRejected)
        #expect(Kind.answer(status: 401, body: "expired token") == .tokenRejected)
        #expect(Kind.answer(status: 401, body: "invalid key") == .credentialsRejected)
        #expect(Kind.answer(status: 403, body: "unauthorized permission requested") == .credentialsRejected)
        #expect(
            Kind.answer(status: 400, body: "URL (https://r.example/webhooks/trello/a) did not return 200 status code, got 404")
                == .callbackUnreachable)
        #expect(Kind.answer(status: 400, body: "invalid value for idModel") == .refused)
        #expect(Kind.answer(status: 404, body: "The requested resource was not found.") == .notFound)
        #expect(Kind.answer(status: 429, body: "API_TOKEN_LIMIT_EXCEEDED") == .rateLimited)
        #expect(Kind.answer(status: 503, body: "") == .serverError)
        #expect(TrelloError(status: nil, message: "request failed: timeout", isTransient: true).kind == .unreachable)
        #expect(TrelloError(status: 200, message: "card reply has no id", isTransient: false).kind == .badReply)
        #expect(TrelloError(status: 401, message: "x", isTransient: false, kind: .tokenRejected).isCredentialFailure)
        #expect(!TrelloError(status: 400, message: "x", isTransient: false).isCredentialFailure)
    }
}

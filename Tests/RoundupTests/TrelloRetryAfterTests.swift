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

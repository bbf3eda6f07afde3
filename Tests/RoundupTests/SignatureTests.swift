import Foundation
import RoundupCore
import RoundupTesting
import Testing

/// The vectors of ../shared/trello-fixtures/SIGNATURE_VECTORS.md.
@Suite struct SignatureTests {
    let body1 = #"{"action":{"type":"createCard"},"model":{"id":"123"}}"#

    @Test func vector1() {
        #expect(
            TrelloSignature.sign(secret: "test-oauth-secret-12345", body: Array(body1.utf8), callbackURL: "https://example.com/webhook")
                == "gk+lIq3ZVA4LNMPCM42Jdb6shFQ=")
        #expect(
            TrelloSignature.verify(
                header: "gk+lIq3ZVA4LNMPCM42Jdb6shFQ=", secret: "test-oauth-secret-12345", body: Array(body1.utf8),
                callbackURL: "https://example.com/webhook"))
    }

    @Test func trailingSlashAndHTTPDoNotVerify() {
        let secret = "test-oauth-secret-12345"
        #expect(
            TrelloSignature.sign(secret: secret, body: Array(body1.utf8), callbackURL: "https://example.com/webhook/")
                == "GYInpy2H8/zcsWGimjKWtIlraHQ=")
        #expect(
            TrelloSignature.sign(secret: secret, body: Array(body1.utf8), callbackURL: "http://example.com/webhook") == "YKjNO9tZj1sBQudkpEDIqAjpCdk="
        )
        #expect(
            !TrelloSignature.verify(
                header: "GYInpy2H8/zcsWGimjKWtIlraHQ=", secret: secret, body: Array(body1.utf8), callbackURL: "https://example.com/webhook"))
        #expect(
            !TrelloSignature.verify(
                header: "YKjNO9tZj1sBQudkpEDIqAjpCdk=", secret: secret, body: Array(body1.utf8), callbackURL: "https://example.com/webhook"))
    }

    @Test func vector2() {
        #expect(
            TrelloSignature.sign(secret: "secret", body: Array(#"{"hello":"world"}"#.utf8), callbackURL: "https://example.com/webhooks")
                == "FwPAcuGe9EP/+SbXFWjnEVTa0zw=")
        // The value some README shows for these inputs is wrong and must not verify.
        #expect(
            !TrelloSignature.verify(
                header: "LeCJzA5aHiwh4zcxLhY25TJSNg=", secret: "secret", body: Array(#"{"hello":"world"}"#.utf8),
                callbackURL: "https://example.com/webhooks"))
    }

    @Test func vector3UTF8Body() throws {
        let url = TestSupport.fixturesDirectory.appendingPathComponent("updateCard__name__model-list__unicode__vacationWorker.json")
        let body = try Data(contentsOf: url)
        #expect(body.count == 2269)
        #expect(
            TrelloSignature.verify(
                header: "jPdxMf4Rkl+DyUFl+VW5tQm9xLg=", secret: "test-oauth-secret", body: Array(body),
                callbackURL: "https://example.com/trello/webhook"))
        // The pre-2016 "binary" encoding is not what Trello signs today.
        #expect(
            !TrelloSignature.verify(
                header: "WXUTg+hT7PffsdBiuqKMEUdS2oU=", secret: "test-oauth-secret", body: Array(body),
                callbackURL: "https://example.com/trello/webhook"))
    }

    @Test func garbageHeadersDoNotVerify() {
        for header in ["", "not base64!", "AAAA", String(repeating: "A", count: 28)] {
            #expect(!TrelloSignature.verify(header: header, secret: "s", body: Array("{}".utf8), callbackURL: "https://x"))
        }
    }

    @Test func constantTimeEqualsAndMasking() {
        #expect(constantTimeEquals(Array("abc".utf8), Array("abc".utf8)))
        #expect(!constantTimeEquals(Array("abc".utf8), Array("abd".utf8)))
        #expect(!constantTimeEquals(Array("abc".utf8), Array("abcd".utf8)))
        #expect(maskSecret("0123456789abcdef") == "••••••••cdef")
        #expect(maskSecret("short") == "••••••••")
        #expect(maskSecret(nil) == nil)
    }
}

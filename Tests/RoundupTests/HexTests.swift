import Foundation
import RoundupCore
import Testing

@testable import RoundupAPI

/// Hex written by one table (`Hex`) is the hex the server wrote before: stored token hashes must keep matching, and ids
/// keep their form.
struct HexTests {
    @Test func uuidsAreWrittenAsFoundationWritesThem() {
        let fixed = [
            UUID(uuid: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)),
            UUID(uuid: (255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255)),
            UUID(uuidString: "0F1E2D3C-4B5A-6978-8796-A5B4C3D2E1F0")!,
        ]
        for uuid in fixed + (0..<1_000).map({ _ in UUID() }) {
            #expect(Hex.lowercase(uuid) == uuid.uuidString.lowercased())
        }
    }

    /// SHA-256 test vectors (FIPS 180-2): the hash a token is stored under is unchanged.
    @Test func tokenHashesAreLowercaseSHA256() {
        #expect(AuthenticationMiddleware.hash("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        #expect(AuthenticationMiddleware.hash("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
    }

    @Test func callbackTokensAre64LowercaseHexDigits() {
        for _ in 0..<100 {
            let token = WebhookCallback.makeToken()
            #expect(token.utf8.count == 64 && WebhookCallback.isToken(token), "\(token)")
        }
    }
}

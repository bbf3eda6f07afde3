/// An account's Trello API key and token: what the store keeps (encrypted at rest where configured) and every Trello
/// request is signed with. Its description masks both, so one interpolated into a log line leaks nothing.
package struct TrelloCredentials: Sendable, Hashable, CustomStringConvertible {
    package var apiKey: String
    package var token: String

    package init(apiKey: String, token: String) {
        self.apiKey = apiKey
        self.token = token
    }

    package var description: String { "TrelloCredentials(api key …\(apiKey.suffix(4)), token masked)" }
}

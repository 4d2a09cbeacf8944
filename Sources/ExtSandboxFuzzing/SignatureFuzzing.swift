import ExtensionCatalog

/// Fuzz entry point of bundle signatures (docs/signatures.md): `extension.signature` comes with
/// the bundle, from whoever shipped it, and is parsed before anything is verified.
public enum SignatureFuzzing {
    /// Input: a signature file's bytes. Properties: the parser neither crashes nor traps, and an
    /// error always says something; a file that parses is canonical (rendering it gives back the
    /// input byte for byte, so one listing has one signed text); every entry it lists is found by
    /// its path; checking the signature (over any key and bytes) answers without crashing.
    public static func bundleSignature(_ input: UnsafeRawBufferPointer) {
        let bytes = Array(input)
        let signature: BundleSignature
        do {
            signature = try BundleSignature.parse(bytes, path: "/fuzz/extension.signature")
        } catch {
            require(!error.description.isEmpty, "an empty signature error")
            return
        }
        require(Array(signature.rendered().utf8) == bytes, "a signature file that parses is not canonical: \(signature.rendered())")
        for entry in signature.entries {
            require(signature.entry(entry.path) == entry, "the entry \(entry.path) is not found by its path")
        }
        _ = signature.isValid
    }
}

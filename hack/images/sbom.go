package main

import (
	"cmp"
	"debug/buildinfo"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"ichor.dev/ichor/hack/internal/modlicense"
)

// An SBOM is an SPDX 2.3 document of one image: the image, the Go
// toolchain that built its binary, and every module the binary links, with
// its version, its go.sum hash and the licence its licence file declares
// (hack/internal/modlicense, the report `make licenses` prints). The
// modules are read from the binary itself (its embedded build info), so
// the SBOM says what was built, not what go.mod asks for.

type spdxDocument struct {
	SPDXVersion       string             `json:"spdxVersion"`
	DataLicense       string             `json:"dataLicense"`
	SPDXID            string             `json:"SPDXID"`
	Name              string             `json:"name"`
	DocumentNamespace string             `json:"documentNamespace"`
	CreationInfo      spdxCreationInfo   `json:"creationInfo"`
	Packages          []spdxPackage      `json:"packages"`
	Relationships     []spdxRelationship `json:"relationships"`
}

type spdxCreationInfo struct {
	Created  string   `json:"created"`
	Creators []string `json:"creators"`
}

type spdxPackage struct {
	SPDXID           string            `json:"SPDXID"`
	Name             string            `json:"name"`
	VersionInfo      string            `json:"versionInfo,omitempty"`
	DownloadLocation string            `json:"downloadLocation"`
	FilesAnalyzed    bool              `json:"filesAnalyzed"`
	LicenseConcluded string            `json:"licenseConcluded"`
	LicenseDeclared  string            `json:"licenseDeclared"`
	CopyrightText    string            `json:"copyrightText"`
	Comment          string            `json:"comment,omitempty"`
	ExternalRefs     []spdxExternalRef `json:"externalRefs,omitempty"`
	PrimaryPurpose   string            `json:"primaryPackagePurpose,omitempty"`
}

type spdxExternalRef struct {
	Category string `json:"referenceCategory"`
	Type     string `json:"referenceType"`
	Locator  string `json:"referenceLocator"`
}

type spdxRelationship struct {
	Element string `json:"spdxElementId"`
	Type    string `json:"relationshipType"`
	Related string `json:"relatedSpdxElement"`
}

var spdxIDUnsafe = regexp.MustCompile(`[^A-Za-z0-9.-]+`)

// SBOM writes the SPDX document of c's image for p (digest image), whose
// binary is bin, built from the module at root.
func SBOM(root string, c Component, p v1.Platform, src Source, bin string, image v1.Hash) ([]byte, error) {
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		return nil, fmt.Errorf("read the build info of %s: %w", bin, err)
	}
	mods, err := modlicense.Modules(root, []string{"CGO_ENABLED=0", "GOOS=" + p.OS, "GOARCH=" + p.Architecture}, "./cmd/"+c.Name)
	if err != nil {
		return nil, err
	}
	licences := map[string]string{}
	for _, m := range mods {
		licences[m.Path] = m.Licence
	}
	imageID := "SPDXRef-Image"
	doc := spdxDocument{
		SPDXVersion: "SPDX-2.3", DataLicense: "CC0-1.0", SPDXID: "SPDXRef-DOCUMENT",
		Name:              fmt.Sprintf("%s:%s %s/%s", c.Name, src.Version, p.OS, p.Architecture),
		DocumentNamespace: "https://ichor.dev/spdx/" + c.Name + "/" + image.Hex,
		CreationInfo:      spdxCreationInfo{Created: src.Time.Format(time.RFC3339), Creators: []string{"Tool: ichor hack/images", "Organization: Ichor"}},
		Packages: []spdxPackage{{
			SPDXID: imageID, Name: c.Name, VersionInfo: src.Version, DownloadLocation: "NOASSERTION",
			LicenseConcluded: "Apache-2.0", LicenseDeclared: "Apache-2.0", CopyrightText: "NOASSERTION", PrimaryPurpose: "CONTAINER",
			Comment:      "built from commit " + src.Revision,
			ExternalRefs: []spdxExternalRef{{"PACKAGE-MANAGER", "purl", "pkg:oci/" + c.Name + "@" + image.String() + "?arch=" + p.Architecture}},
		}, {
			SPDXID: "SPDXRef-Go-stdlib", Name: "stdlib", VersionInfo: info.GoVersion, DownloadLocation: "NOASSERTION",
			LicenseConcluded: "BSD-3-Clause", LicenseDeclared: "BSD-3-Clause", CopyrightText: "NOASSERTION",
			ExternalRefs: []spdxExternalRef{{"PACKAGE-MANAGER", "purl", "pkg:golang/stdlib@" + info.GoVersion}},
		}},
		Relationships: []spdxRelationship{{"SPDXRef-DOCUMENT", "DESCRIBES", imageID}, {imageID, "CONTAINS", "SPDXRef-Go-stdlib"}},
	}
	main := spdxPackage{
		SPDXID: "SPDXRef-Go-main", Name: info.Main.Path, VersionInfo: src.Version, DownloadLocation: "NOASSERTION",
		LicenseConcluded: "Apache-2.0", LicenseDeclared: "Apache-2.0", CopyrightText: "NOASSERTION", Comment: "the main module, package " + info.Path,
	}
	doc.Packages = append(doc.Packages, main)
	doc.Relationships = append(doc.Relationships, spdxRelationship{imageID, "CONTAINS", main.SPDXID})
	for _, d := range info.Deps {
		m := d
		if d.Replace != nil {
			m = d.Replace
		}
		licence := cmp.Or(licences[d.Path], "NOASSERTION")
		pkg := spdxPackage{
			SPDXID:           "SPDXRef-Go-" + strings.Trim(spdxIDUnsafe.ReplaceAllString(m.Path+"-"+m.Version, "-"), "-"),
			Name:             d.Path,
			VersionInfo:      m.Version,
			DownloadLocation: "NOASSERTION",
			LicenseConcluded: licence, LicenseDeclared: licence, CopyrightText: "NOASSERTION",
			ExternalRefs: []spdxExternalRef{{"PACKAGE-MANAGER", "purl", "pkg:golang/" + m.Path + "@" + m.Version}},
		}
		if m.Sum != "" {
			pkg.Comment = "go.sum " + m.Sum
		}
		if d.Replace != nil {
			pkg.Comment = strings.TrimSpace(pkg.Comment + "; replaced by " + m.Path + " " + m.Version)
		}
		doc.Packages = append(doc.Packages, pkg)
		doc.Relationships = append(doc.Relationships, spdxRelationship{imageID, "CONTAINS", pkg.SPDXID})
	}
	return json.MarshalIndent(doc, "", "  ")
}

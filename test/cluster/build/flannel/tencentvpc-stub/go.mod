// A stand-in for Tencent Cloud's VPC SDK, which flannel's tencentvpc backend imports and the module
// proxy here does not serve. Only what that backend names is here, and every call fails: the
// cluster test runs flannel's vxlan backend.
module github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/vpc

go 1.26.0

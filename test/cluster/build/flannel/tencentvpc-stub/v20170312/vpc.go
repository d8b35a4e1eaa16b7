// Package v20170312 stands in for Tencent Cloud's VPC API in flannel's build (see ../go.mod).
package v20170312

import "errors"

var errStub = errors.New("tencentvpc: not built into this flannel (cri-dockerd cluster test)")

type Filter struct {
	Name   *string
	Values []*string
}

type Route struct {
	DestinationCidrBlock *string
	GatewayType          *string
	GatewayId            *string
	Enabled              *bool
	RouteId              *uint64
	RouteType            *string
}

type RouteTable struct {
	RouteTableId *string
	RouteSet     []*Route
}

type DescribeRouteTablesRequest struct{ Filters []*Filter }

type DescribeRouteTablesResponse struct {
	Response *struct{ RouteTableSet []*RouteTable }
}

type DeleteRoutesRequest struct {
	RouteTableId *string
	Routes       []*Route
}

type CreateRoutesRequest struct {
	RouteTableId *string
	Routes       []*Route
}

type Client struct{}

func NewClientWithSecretId(id, key, region string) (*Client, error) { return &Client{}, nil }

func NewDescribeRouteTablesRequest() *DescribeRouteTablesRequest {
	return &DescribeRouteTablesRequest{}
}
func NewDeleteRoutesRequest() *DeleteRoutesRequest { return &DeleteRoutesRequest{} }
func NewCreateRoutesRequest() *CreateRoutesRequest { return &CreateRoutesRequest{} }

func (*Client) DescribeRouteTables(*DescribeRouteTablesRequest) (*DescribeRouteTablesResponse, error) {
	return nil, errStub
}
func (*Client) DeleteRoutes(*DeleteRoutesRequest) (any, error) { return nil, errStub }
func (*Client) CreateRoutes(*CreateRoutesRequest) (any, error) { return nil, errStub }
